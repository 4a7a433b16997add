#!/bin/bash
# From /work/shared/seeds/004_7aa62fc825831cba.txt ("方案3: 使用SLURM"), with the NCCL
# settings of its "启用NCCL优化" section exported first.
#SBATCH --job-name=3d_parallel
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:8
#SBATCH --time=48:00:00

export NCCL_DEBUG=INFO
export NCCL_IB_DISABLE=0          # 启用InfiniBand
export NCCL_NET_GDR_LEVEL=5       # 启用GPUDirect RDMA
export NCCL_SOCKET_IFNAME=eth0    # 指定网络接口

# 设置主节点
export MASTER_ADDR=$(scontrol show hostname $SLURM_NODELIST | head -n 1)
export MASTER_PORT=29500

# 启动训练
srun torchrun \
    --nproc_per_node=8 \
    --nnodes=$SLURM_NNODES \
    --node_rank=$SLURM_NODEID \
    --master_addr=$MASTER_ADDR \
    --master_port=$MASTER_PORT \
    train_3d_parallel.py \
    --tp_size 2 \
    --pp_size 2
