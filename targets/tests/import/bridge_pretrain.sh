#!/bin/bash
# Megatron Bridge's recipe script with its config file and Hydra's overrides, which win.
torchrun --nproc_per_node=8 --nnodes=2 examples/recipes/qwen/pretrain_qwen3_30b_a3b.py \
    --config-file bridge_qwen3_30b_a3b.yaml \
    model.expert_model_parallel_size=16 \
    model.recompute_granularity=selective \
    train.global_batch_size=1024 \
    mixed_precision=bf16_mixed \
    logger.log_interval=1
