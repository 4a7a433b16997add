"""host_ops.py: how long the host takes to launch one small eager PyTorch operation on the
lent machine, forward (recorded for autograd) and in autograd's backward: the floor under an
unfused framework's step when its kernels are shorter than their launches.

    python3 runtime/tests/gpu/host_ops.py
"""
import time

import torch

x = torch.randn(64, 64, device="cuda", requires_grad=True)
n = 4000
for _ in range(3):
    y = x
    for _ in range(200):
        y = y * 1.0001 + 0.1
    y.sum().backward()
torch.cuda.synchronize()
t0 = time.perf_counter()
y = x
for _ in range(n // 2):
    y = y * 1.0001 + 0.1
t1 = time.perf_counter()
y.sum().backward()
torch.cuda.synchronize()
t2 = time.perf_counter()
print(f"host_ops: {n} eager ops: forward {1e6 * (t1 - t0) / n:.2f} us an op, backward {1e6 * (t2 - t1) / n:.2f} us an op (torch {torch.__version__})")
