#!/bin/bash
# NeMo 1.0's pretraining script: Hydra's --config-path/--config-name, then overrides.
python /opt/NeMo/examples/nlp/language_modeling/megatron_gpt_pretraining.py \
    --config-path=. --config-name=nemo_llama3_70b \
    trainer.num_nodes=16 \
    model.tensor_model_parallel_size=8 \
    model.optim.lr=3e-4 \
    +model.optim.sched.warmup_steps=100
