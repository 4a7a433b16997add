"""Loads a planc ds_config.json through DeepSpeed's own config class, DeepSpeedConfig.

Usage: python ds_config.py DS_CONFIG_JSON DP TP
DeepSpeedConfig checks train_batch_size = micro batch x gradient accumulation x the data
parallel world size, which it asks the model-parallel unit (mpu) for; the mpu here answers
with the plan's dp and tp. No process group is started: the config asks it only for this
process's rank, answered as rank 0.
Exits 0 when DeepSpeed accepts the config.
"""
import sys


def enabled(cfg, precision):
    """DeepSpeed 0.17+ keeps a `<precision>_config` object; older releases a boolean."""
    section = getattr(cfg, f"{precision}_config", None)
    if section is not None:
        return section.enabled
    return getattr(cfg, f"{precision}_enabled", None)


def main():
    path, dp, tp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    import deepspeed.runtime.config as config
    from deepspeed.runtime.config import DeepSpeedConfig

    config.dist.get_rank = lambda group=None: 0

    class Mpu:
        def get_data_parallel_world_size(self):
            return dp

        def get_data_parallel_rank(self):
            return 0

        def get_model_parallel_world_size(self):
            return tp

        def get_model_parallel_rank(self):
            return 0

    cfg = DeepSpeedConfig(path, mpu=Mpu())
    print(
        f"deepspeed accepted {path}: train_batch_size={cfg.train_batch_size} "
        f"micro={cfg.train_micro_batch_size_per_gpu} grad_accum={cfg.gradient_accumulation_steps} "
        f"zero_stage={cfg.zero_optimization_stage} "
        f"bf16={enabled(cfg, 'bfloat16')} fp16={enabled(cfg, 'float16')}"
    )


if __name__ == "__main__":
    main()
