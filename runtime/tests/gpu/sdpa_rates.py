#!/usr/bin/env python3
"""sdpa_rates.py: the frameworks' fused attention kernels by sequence length and head size.

    python3 runtime/tests/gpu/sdpa_rates.py [--json OUT]

PyTorch's scaled_dot_product_attention with its FlashAttention-2 backend and its cuDNN
backend (Transformer Engine's choice on Hopper), causal, bf16, forward and backward, at
32768 tokens a call (batch = 32768 / sequence) and heads making a width of 4096: the rate a
published figure at one sequence length (FlashAttention-3's paper: 16k) stands for at the
lengths plans train at. FLOPs count the causal half: forward 2 * 2 * b * h * s^2 * d / 2,
backward 2.5 times that (FlashAttention's count). Times are medians of 10 after 3 warm-ups.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from cuda_timing import median_ms

BACKENDS = {"flash2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def point(backend, d, s, tokens=32768, width=4096):
    b, h = max(1, tokens // s), width // d
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(BACKENDS[backend]):
        fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def both():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(o, (q, k, v), g)

        total = median_ms(both)
    del out
    flops = 2 * 2 * b * h * s * s * d / 2
    bwd = max(total - fwd, 1e-6)
    return {"backend": backend, "head_dim": d, "seq": s, "batch": b, "heads": h,
            "forward_ms": fwd, "backward_ms": bwd,
            "forward_tflops": flops / fwd / 1e9, "backward_tflops": 2.5 * flops / bwd / 1e9}


def main():
    rows = []
    for backend in BACKENDS:
        for d in (64, 128):
            for s in (512, 1024, 2048, 4096, 8192, 16384):
                try:
                    r = point(backend, d, s)
                except Exception as e:  # a backend that refuses a shape says so
                    r = {"backend": backend, "head_dim": d, "seq": s, "error": str(e).splitlines()[0][:120]}
                rows.append(r)
                if "error" in r:
                    print(f"sdpa_rates: {backend} d={d} s={s}: {r['error']}")
                else:
                    print(f"sdpa_rates: {backend} d={d} s={s:5d}: forward {r['forward_tflops']:6.1f} "
                          f"backward {r['backward_tflops']:6.1f} TFLOP/s ({r['forward_ms']:.3f} / {r['backward_ms']:.3f} ms)")
                torch.cuda.empty_cache()
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
