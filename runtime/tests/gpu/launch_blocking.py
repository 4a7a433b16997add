#!/usr/bin/env python3
"""launch_blocking.py: what `CUDA_LAUNCH_BLOCKING=1` costs a kernel on the lent machine.

    python3 runtime/tests/gpu/launch_blocking.py [--json OUT]

With the variable set, every launch returns only once its kernel has finished, so the host's
dispatch of the next operation no longer overlaps the GPU's work: each kernel pays its own
time plus the host's dispatch and the launch's round trip. Each setting runs in its own
process (the variable is read when CUDA starts): a chain of small eager ops recorded for
autograd (forward, then backward) and a chain of 4096^3 bf16 products (a kernel long
enough that the host runs ahead when launches do not block). The figure the cost model
wants is the time a blocked launch adds to its kernel: for the small ops, the per-op time
blocking (the GPU's time is a few microseconds); for the products, the per-product time
blocking less not blocking.
"""
import json
import os
import subprocess
import sys

CHILD = r"""
import json, time, torch
x = torch.randn(64, 64, device="cuda", requires_grad=True)
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
def chain(n):
    y = x
    for _ in range(n):
        y = y * 1.0001 + 0.1
    return y
for _ in range(3):
    chain(200).sum().backward()
    a @ a
torch.cuda.synchronize()
n = 4000
t0 = time.perf_counter()
y = chain(n // 2)
t1 = time.perf_counter()
y.sum().backward()
torch.cuda.synchronize()
t2 = time.perf_counter()
m = 300
t3 = time.perf_counter()
for _ in range(m):
    a @ a
torch.cuda.synchronize()
t4 = time.perf_counter()
print(json.dumps({"forward_us": 1e6 * (t1 - t0) / n, "backward_us": 1e6 * (t2 - t1) / n,
                  "product_us": 1e6 * (t4 - t3) / m, "torch": torch.__version__}))
"""


def run(blocking):
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1" if blocking else "0")
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    free, blocked = run(False), run(True)
    added = blocked["product_us"] - free["product_us"]
    result = {"not_blocking": free, "blocking": blocked, "blocked_product_adds_us": added}
    print(f"launch_blocking: small op forward {free['forward_us']:.2f} -> {blocked['forward_us']:.2f} us, "
          f"backward {free['backward_us']:.2f} -> {blocked['backward_us']:.2f} us; "
          f"4096^3 product {free['product_us']:.1f} -> {blocked['product_us']:.1f} us (+{added:.1f}) "
          f"(torch {free['torch']})")
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
