#!/bin/bash
# From /work/shared/seeds/003_50620ba1473e6073.txt ("多机启动脚本"): LLaMA-Factory through
# DeepSpeed's launcher on the hostfile and DeepSpeed config of the same section
# (seed003_hostfile, ds_config_multi_machine.json beside this file).
# launch_multi_machine.sh

# 环境变量设置
export MASTER_ADDR="node1"
export MASTER_PORT="29500"
export WORLD_SIZE=32  # 4 nodes * 8 GPUs
export NCCL_DEBUG=INFO
export NCCL_IB_DISABLE=0  # 启用InfiniBand
export NCCL_SOCKET_IFNAME=ib0  # InfiniBand接口

# DeepSpeed参数
DEEPSPEED_CONFIG="ds_config_multi_machine.json"
HOSTFILE="seed003_hostfile"

# 模型和数据参数
MODEL_NAME="meta-llama/Llama-2-70b-hf"
DATASET="large_scale_medical_corpus"
OUTPUT_DIR="/shared/outputs/multi_machine_$(date +%Y%m%d_%H%M%S)"

# 启动DeepSpeed训练
deepspeed --hostfile $HOSTFILE \
          --master_addr $MASTER_ADDR \
          --master_port $MASTER_PORT \
          src/train_bash.py \
          --deepspeed $DEEPSPEED_CONFIG \
          --stage sft \
          --model_name_or_path $MODEL_NAME \
          --do_train \
          --dataset $DATASET \
          --template llama2 \
          --finetuning_type lora \
          --lora_target q_proj,v_proj,k_proj,o_proj,gate_proj,up_proj,down_proj \
          --output_dir $OUTPUT_DIR \
          --overwrite_cache \
          --per_device_train_batch_size 1 \
          --gradient_accumulation_steps 64 \
          --lr_scheduler_type cosine \
          --logging_steps 10 \
          --save_steps 1000 \
          --learning_rate 0.00005 \
          --num_train_epochs 3.0 \
          --plot_loss \
          --bf16 \
          --lora_rank 64 \
          --lora_alpha 128 \
          --lora_dropout 0.05 \
          --val_size 0.05 \
          --evaluation_strategy steps \
          --eval_steps 1000 \
          --load_best_model_at_end \
          --report_to wandb
