"""Loads planc's torchtitan modules as torchtitan does and checks what it builds.

Usage: torchtitan_config.py DIR FUNCTION [DIR FUNCTION ...]. For each emitted folder:
torchtitan's own ConfigManager parses `--module planc_torchtitan --config FUNCTION` (so a
field torchtitan does not know, or a value it refuses, fails here), the model is built on
the meta device, and the data loader's first batch is planc's first samples. Prints one
line per folder; exits non-zero at the first failure.
"""

import sys

import torch
from torchtitan.config import ConfigManager


def check(folder, function):
    sys.path.insert(0, folder)
    sys.modules.pop("planc_torchtitan", None)
    try:
        config = ConfigManager().parse_args(["--module", "planc_torchtitan", "--config", function])
        import planc_torchtitan as m

        model_config = config.model_spec.model
        with torch.device("meta"):
            model = model_config.build()
        params = sum(p.numel() for p in model.parameters())
        # The plan's shapes, as torchtitan built them.
        assert model_config.dim == m.DIM and model_config.vocab_size == m.VOCAB, model_config
        assert len(model.layers) == m.LAYERS, len(model.layers)
        p = config.parallelism
        parts = p.module_fqns_per_model_part
        if parts is not None:
            named = [n for part in parts for n in part]
            assert named.count("tok_embeddings") == 1 and named[-1] == "lm_head", parts
            assert [n for n in named if n.startswith("layers.")] == [
                f"layers.{i}" for i in range(m.LAYERS)], parts
        # Rank 0's first batch is samples 0.. of planc's stream, inputs and targets shifted.
        # A short sequence keeps the synthetic corpus cheap here.
        loader = config.dataloader.build(dp_world_size=1, dp_rank=0, tokenizer=None,
                                         seq_len=16, local_batch_size=2)
        x, y = next(iter(loader))
        want = m.Tokens(config.dataloader.data, config.dataloader.seed, m.VOCAB, 16).samples(0, 2)
        assert x["input"].tolist() == want[:, :-1].tolist() and y.tolist() == want[:, 1:].tolist()
        assert x["positions"].tolist() == [list(range(16))] * 2
        print(f"{folder}: {function}: {params / 1e9:.3f} B parameters, "
              f"dp_shard {p.data_parallel_shard_degree} tp {p.tensor_parallel_degree} "
              f"pp {p.pipeline_parallel_degree} cp {p.context_parallel_degree}")
    finally:
        sys.path.remove(folder)


def main(argv):
    pairs = list(zip(argv[0::2], argv[1::2]))
    for folder, function in pairs:
        check(folder, function)


if __name__ == "__main__":
    main(sys.argv[1:])
