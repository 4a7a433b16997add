"""torchtitan 0.2.x reads what planc emits: the job file through torchtitan's own
ConfigManager (a key it does not know fails), the flavor module through the job file's
experimental.custom_import, the train spec it registers through get_train_spec, and the model
built from it on the meta device, which must have planc's parameter count and FFN width.

    python torchtitan_v02.py WORLD_SIZE:FOLDER...

Each folder is checked in turn in one process (torch and torchtitan import once). Prints one
JSON line of what it checked per folder; exits non-zero with torchtitan's message at the
first folder it refuses.
"""

import importlib
import json
import os
import sys

import torch
from torchtitan.config import ConfigManager
from torchtitan.distributed import ParallelDims
from torchtitan.protocols import train_spec
from torchtitan.protocols.train_spec import get_train_spec


def check(folder, world):
    job_file = os.path.join(folder, "torchtitan-job.toml")
    cfg = ConfigManager().parse_args(["--job.config_file", job_file])

    # Each folder's module registers the same names: forget the previous folder's.
    sys.path.insert(0, folder)
    sys.modules.pop(cfg.experimental.custom_import, None)
    train_spec._extra_train_specs.pop(cfg.model.name, None)
    module = importlib.import_module(cfg.experimental.custom_import)
    sys.path.remove(folder)
    spec = get_train_spec(cfg.model.name)
    args = spec.model_args[cfg.model.flavor]
    args.update_from_config(cfg)

    # torchtitan's own check that the degrees fill the world.
    par = cfg.parallelism
    ParallelDims(
        dp_shard=par.data_parallel_shard_degree,
        dp_replicate=par.data_parallel_replicate_degree,
        cp=par.context_parallel_degree,
        tp=par.tensor_parallel_degree,
        pp=par.pipeline_parallel_degree,
        ep=par.expert_parallel_degree,
        etp=par.expert_tensor_parallel_degree,
        world_size=world,
    )

    with torch.device("meta"):
        model = spec.model_cls(args)
    params = sum(p.numel() for p in model.parameters())
    assert params == module.PLANC_PARAMS, (
        f"the model has {params} parameters, planc counts {module.PLANC_PARAMS}"
    )
    ffn = model.layers["0"].feed_forward.w1.out_features
    assert ffn == module.FFN_HIDDEN, f"FFN width {ffn}, the plan says {module.FFN_HIDDEN}"
    assert len(model.layers) == module.LAYERS
    if module.TIED_EMBEDDINGS:
        assert model.output.weight is model.tok_embeddings.weight, "the output layer is not tied"

    # The pipeline's parts name every module once, in order.
    parts = par.module_fqns_per_model_part
    if parts:
        names = [n for part in parts for n in part]
        expected = ["tok_embeddings"] + [f"layers.{i}" for i in range(module.LAYERS)]
        expected += ["norm", "output"]
        assert names == expected, f"pipeline parts {parts}"
        assert len(parts) % par.pipeline_parallel_degree == 0

    gb, lb = cfg.training.global_batch_size, cfg.training.local_batch_size
    dp = par.data_parallel_replicate_degree * par.data_parallel_shard_degree
    assert gb % (lb * dp) == 0, f"global batch {gb} is not a multiple of {lb} x dp {dp}"

    print(
        json.dumps(
            {
                "params": params,
                "ffn": ffn,
                "flavor": cfg.model.flavor,
                "steps": cfg.training.steps,
                "lr": cfg.optimizer.lr,
                "dp_shard": par.data_parallel_shard_degree,
                "dp_replicate": par.data_parallel_replicate_degree,
                "tp": par.tensor_parallel_degree,
                "pp": par.pipeline_parallel_degree,
                "cp": par.context_parallel_degree,
                "pipeline_parts": len(parts or []),
                "ac": cfg.activation_checkpoint.mode,
            }
        )
    )


for arg in sys.argv[1:]:
    world, folder = arg.split(":", 1)
    check(folder, int(world))
