"""The GPU kernels of a train.py that planc emitted, without hooks: what a plain step runs.

torch_kinds.py splits the step by module, but its hooks cost the host time. This script runs
the emitted script's `main` under torch.profiler (no stacks, no hooks beyond the profiler's
own), steps 5-9 of it, and prints as JSON:

- `step_ms`: the profiled steps' mean wall time;
- `kernel_ms`: the kernels' summed time a step, and `busy_ms`: the union of their intervals
  on all streams (what the GPU was doing); `idle_ms` = step - busy: where the GPU waited for
  the host (dispatch, a `.item()`, FSDP's hooks) or for nothing;
- `ops`: the PyTorch operations by their own GPU time a step (the kernels each launched),
  with their input shapes, largest first; `kernels`: the same by kernel name.

    python torch_profile.py EMITTED/train.py --steps 12 --mock-data [train.py flags...]

The JSON is the last thing on standard output.
"""

import collections
import importlib.util
import json
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule

WAIT, WARMUP, ACTIVE = 3, 2, 5


def load(path):
    spec = importlib.util.spec_from_file_location("planc_train", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def union(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def main():
    path, argv = sys.argv[1], sys.argv[2:]
    train = load(path)
    walls = []
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                   schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
                   record_shapes=True)
    state = {"n": 0, "t": None}

    def step_done():
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        now = time.perf_counter()
        if state["t"] is not None and WAIT + WARMUP <= state["n"] < WAIT + WARMUP + ACTIVE:
            walls.append((now - state["t"]) * 1e3)
        state["t"] = now
        state["n"] += 1
        prof.step()

    class Dist:
        """The script's `torch.distributed`, whose one `all_reduce` a step (the loss's, after
        the optimizer) marks the step's end; the frameworks' own collectives go through
        their own reference to the module and are not counted."""

        def __getattr__(self, name):
            return getattr(train_dist, name)

        def all_reduce(self, *a, **k):
            out = train_dist.all_reduce(*a, **k)
            step_done()
            return out

    train_dist = train.dist
    train.dist = Dist()
    prof.start()
    rc = train.main(argv)
    prof.stop()

    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    spans = [(e.time_range.start, e.time_range.end) for e in kernels]
    by_kernel = collections.defaultdict(lambda: [0.0, 0])
    for e in kernels:
        by_kernel[e.name][0] += e.time_range.elapsed_us()
        by_kernel[e.name][1] += 1
    ops = []
    for a in prof.key_averages(group_by_input_shape=True):
        t = getattr(a, "self_device_time_total", None)
        if t is None:
            t = a.self_cuda_time_total
        if t > 0:
            ops.append({"op": a.key, "shapes": str(a.input_shapes)[:160],
                        "ms": round(t / 1e3 / ACTIVE, 4), "calls": a.count // ACTIVE})
    ops.sort(key=lambda o: -o["ms"])
    step = sum(walls) / len(walls) if walls else float("nan")
    busy = union(spans) / 1e3 / ACTIVE
    print(json.dumps({
        "script": path, "args": argv, "rc": rc, "steps_profiled": len(walls),
        "step_ms": round(step, 3),
        "kernel_ms": round(sum(b - a for a, b in spans) / 1e3 / ACTIVE, 3),
        "busy_ms": round(busy, 3), "idle_ms": round(step - busy, 3),
        "kernels_per_step": len(kernels) // ACTIVE,
        "ops": ops[:80],
        "kernels": sorted(({"name": k[:120], "ms": round(v[0] / 1e3 / ACTIVE, 4),
                            "calls": v[1] // ACTIVE} for k, v in by_kernel.items()),
                          key=lambda k: -k["ms"])[:60],
    }, indent=1))


if __name__ == "__main__":
    main()
