"""Runs Megatron-LM's own argument parsing and validate_args on a planc command line, on CPU.

Usage: python megatron_args.py WORLD_SIZE CAPABILITY TORCHRUN_ARGS...
The conformance test puts a stub `torchrun` first in PATH that runs this with the arguments
and environment the generated launch script gave torchrun. CAPABILITY is the plan's GPU compute capability ("9.0" for
H100): validate_args asks the device for it, the one thing that needs a GPU, so it is
answered from the plan. Megatron-LM must be importable (PYTHONPATH pointing at a checkout).
Exits 0 when Megatron-LM accepts the arguments.
"""
import os
import sys


def main():
    world_size, capability, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    major, minor = (int(x) for x in capability.split("."))
    # torchrun's own flags come first; the training script and its flags follow.
    i = next(i for i, a in enumerate(argv) if a.endswith(".py"))
    script, args = argv[i], argv[i + 1:]
    os.environ.update(WORLD_SIZE=world_size, RANK="0", LOCAL_RANK="0")
    sys.argv = [script] + args
    import torch
    import megatron.training.arguments as arguments

    torch.cuda.get_device_capability = lambda *_: (major, minor)
    arguments.get_device_arch_version = lambda: major
    parse_args, validate_args = arguments.parse_args, arguments.validate_args

    parsed = parse_args()
    validate_args(parsed)
    print(
        f"megatron-lm accepted {len(args)} arguments: tp={parsed.tensor_model_parallel_size} "
        f"pp={parsed.pipeline_model_parallel_size} dp={parsed.data_parallel_size} "
        f"vpp={parsed.virtual_pipeline_model_parallel_size} "
        f"micro={parsed.micro_batch_size} global={parsed.global_batch_size}"
    )


if __name__ == "__main__":
    main()
