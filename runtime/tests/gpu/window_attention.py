#!/usr/bin/env python3
"""window_attention.py: what a sliding window saves a block-sparse attention kernel.

    python3 runtime/tests/gpu/window_attention.py [--json OUT]

planc prices a windowed layer's fused attention at the keys its queries reach, rounded out
to whole tiles of 128 keys, k_w = w - w^2 / (2 s) + 128, beside a fixed cost a block of
queries pays whatever its keys (loading them, writing the output and its statistics), C
keys (`cost::ops::fused_keys`): over s tokens a window of w costs (k_w + C) / (s / 2 + C)
of a causal layer. This script measures the ratio; C = 416 (3.25 tiles) is read from its
kernel-time columns (2026-11-29, runtime/tests/gpu/measured/window_attention.h200.json). The frameworks' windowed kernels
(FlashAttention-2's and cuDNN's `window_size`) are not reachable from PyTorch's SDPA;
FlexAttention is, and it skips the same empty tiles (a block mask of 128 x 128 tiles), so
its windowed time over its own causal time stands for the ratio planc prices. Causal bf16,
GPT-OSS's heads (64 of 64) and Llama's (32 of 128), batch 1, forward and forward+backward,
medians of 10 after warm-up, each shape compiled once.
"""
import json
import sys

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from cuda_timing import median_ms

TILE = 128
FIXED = 3.25 * TILE  # planc's C (cost::ops::ATTENTION_BLOCK_FIXED_KEYS)
torch._dynamo.config.recompile_limit = 64
torch._dynamo.config.cache_size_limit = 64
flex = torch.compile(flex_attention, dynamic=False)


def kernel_ms(fn, reps=5):
    """The GPU's own time a call: its kernels' durations summed under torch.profiler, so a
    call's launches and host work (large beside a windowed layer's small kernels) drop out."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    total_us = sum(
        e.device_time_total for e in prof.key_averages() if e.device_type.name == "CUDA"
    )
    return total_us / 1000.0 / reps


def mask_of(window):
    def causal(b, h, q, k):
        return q >= k

    def windowed(b, h, q, k):
        return (q >= k) & (q - k < window)

    return causal if window is None else windowed


def point(s, heads, d, window):
    q, k, v = (
        torch.randn(1, heads, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    block = create_block_mask(mask_of(window), None, None, s, s, device="cuda")
    grad = torch.randn(1, heads, s, d, device="cuda", dtype=torch.bfloat16)

    def fwd():
        with torch.no_grad():
            flex(q, k, v, block_mask=block)

    def both():
        out = flex(q, k, v, block_mask=block)
        out.backward(grad)

    return median_ms(fwd), median_ms(both), kernel_ms(fwd), kernel_ms(both)


def priced(s, d, window):
    if window is None or window >= s:
        return 1.0
    w = float(window)
    keys = w - w * w / (2 * s) + TILE
    return min((keys + FIXED) / (s / 2 + FIXED), 1.0)


def main():
    out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("seq   heads x d  window  fwd ms  fwd+bwd ms  fwd/causal  both/causal  kernels: fwd/causal  both/causal  priced")
    for s, heads, d in [(4096, 64, 64), (8192, 32, 128), (4096, 32, 128), (8192, 64, 64)]:
        base = None
        for window in [None, 128, 512, 1024, 4096]:
            if window is not None and window >= s:
                continue
            fwd, both, kfwd, kboth = point(s, heads, d, window)
            if base is None:
                base = (fwd, both, kfwd, kboth)
            row = {
                "seq": s,
                "heads": heads,
                "head_dim": d,
                "window": window,
                "forward_ms": fwd,
                "forward_backward_ms": both,
                "forward_over_causal": fwd / base[0],
                "both_over_causal": both / base[1],
                "kernel_forward_ms": kfwd,
                "kernel_forward_backward_ms": kboth,
                "kernel_forward_over_causal": kfwd / base[2],
                "kernel_both_over_causal": kboth / base[3],
                "priced_over_causal": priced(s, d, window),
            }
            rows.append(row)
            print(
                f"{s:5d} {heads:3d} x {d:3d}  {str(window):>6}  {fwd:6.3f}  {both:10.3f}"
                f"  {row['forward_over_causal']:10.3f}  {row['both_over_causal']:11.3f}"
                f"  {row['kernel_forward_over_causal']:19.3f}  {row['kernel_both_over_causal']:11.3f}"
                f"  {row['priced_over_causal']:6.3f}"
            )
    if out:
        with open(out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
