#!/bin/bash
# From /work/shared/seeds/000_4a1feefdf27bc6c3.txt ("端到端训练", Megatron-LM 集成, steps 3 and 4):
# the training arguments of step 3 and the MPI launch script of step 4, which runs them.
# The document shows them escaped (\" and \\); here they are as a shell runs them.

# 设置基本训练参数
MICRO_BATCH_SIZE=4
GLOBAL_BATCH_SIZE=512
TP_SIZE=2              # Tensor 并行度
PP_SIZE=4              # Pipeline 并行度

# VCCL 优化配置
TRAINING_ARGS="
    --micro-batch-size $MICRO_BATCH_SIZE \
    --global-batch-size $GLOBAL_BATCH_SIZE \
    --tensor-model-parallel-size $TP_SIZE \
    --pipeline-model-parallel-size $PP_SIZE \
    --num-layers-per-virtual-pipeline-stage 5 \
    --use-distributed-optimizer \
    --batch-p2p-communication \
    --recompute-granularity selective \
"

# train_gpt_vccl.sh

# VCCL 环境配置
export LD_LIBRARY_PATH=/workspace/infrawaves/share/liuda/vc226/vccl_2.26.6-1/build/lib:$LD_LIBRARY_PATH

# VCCL 特性启用
export NCCL_PXN_DISABLE=1      # 禁用 PXN（根据需要）
export NCCL_PASS_SM=1          # 启用 SM Free 模式
export NCCL_CUMEM_ENABLE=1     # 启用 CUDA 内存池
export NCCL_ENABLE_FAULT_TOLERANCE=1  # 启用容错

# 网络配置
export NCCL_IB_GID_INDEX=3
export NCCL_IB_HCA=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1

# 调试和监控
export NCCL_DEBUG=WARN
export NCCL_TELEMETRY_ENABLE=1
export NCCL_TELEMETRY_LOG_PATH=/tmp/training_telemetry

# 训练启动
mpirun -np 128 \
    --hostfile hostfile \
    --allow-run-as-root \
    --map-by ppr:8:node \
    -x LD_LIBRARY_PATH \
    -x NCCL_PXN_DISABLE=1 \
    -x NCCL_PASS_SM=1 \
    -x NCCL_CUMEM_ENABLE=1 \
    -x NCCL_ENABLE_FAULT_TOLERANCE=1 \
    -x NCCL_IB_HCA=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1 \
    python pretrain_gpt.py $TRAINING_ARGS
