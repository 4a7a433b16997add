#!/bin/bash
# From /work/shared/seeds/000_4a1feefdf27bc6c3.txt ("Slurm 集群配置"): a Slurm job whose
# training script (train_large_model.py) is not one planc knows.
#SBATCH --job-name=vccl_training
#SBATCH --nodes=16
#SBATCH --ntasks-per-node=8
#SBATCH --gres=gpu:8
#SBATCH --time=24:00:00
#SBATCH --partition=gpu

# VCCL 环境配置
export LD_LIBRARY_PATH=/opt/vccl/lib:$LD_LIBRARY_PATH
export NCCL_PASS_SM=1
export NCCL_CUMEM_ENABLE=1
export NCCL_ENABLE_FAULT_TOLERANCE=1
export NCCL_IB_HCA=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1

# Slurm 环境变量
export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
export MASTER_PORT=29500
export WORLD_SIZE=$SLURM_NTASKS

# 启动训练
srun python -u train_large_model.py \
    --distributed \
    --backend nccl \
    --model-size 175B \
    --batch-size 4 \
    --sequence-length 2048
