#!/usr/bin/env python3
"""attention_sdpa.py: PyTorch's fused attention at the shapes planc's attention speed test
times (runtime/tests/attention_cudnn.rs, `speed`), through SDPA's FlashAttention-2 and
cuDNN backends, printed in the same `speed` lines; with --planc LOG, the Rust test's lines
beside them in one table per shape, and the issue's verdict (planc's cuDNN path at least
SDPA's flash backend forward and backward at 4 x 4096, 32 heads of 128).

    python3 attention_sdpa.py [--planc speed-planc.log]

TFLOP/s count the causal half: forward 4·b·h·t²·d/2, backward 2.5 × that. q, k and v are
contiguous [b, h, t, d] bf16; grouped-query shapes use SDPA's enable_gqa where the backend
takes it, else the key/value heads repeated (said in the line).
"""
import argparse
import re
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [
    # (label, b, h, g, t, d): the same labels as attention_cudnn.rs
    ("issue: 4x4096, 32 heads of 128", 4, 32, 32, 4096, 128),
    ("GPT 6.6B: 1x2048, 32 heads of 128", 1, 32, 32, 2048, 128),
    ("GPT-2 124M: 16x1024, 12 heads of 64", 16, 12, 12, 1024, 64),
    ("Llama 3.2 1B: 4x2048, 32 of 64, 8 kv", 4, 32, 8, 2048, 64),
]
ISSUE = SHAPES[0][0]


def timed(fn, iters=20, warmup=3):
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def measure(backend, b, h, g, t, d):
    dev, dt = torch.device("cuda"), torch.bfloat16
    q = torch.randn(b, h, t, d, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(b, g, t, d, device=dev, dtype=dt, requires_grad=True)
    v = torch.randn(b, g, t, d, device=dev, dtype=dt, requires_grad=True)
    kw, how = {}, ""
    if g != h:
        try:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            kw, how = {"enable_gqa": True}, " (enable_gqa)"
        except RuntimeError:
            k = k.detach().repeat_interleave(h // g, 1).requires_grad_(True)
            v = v.detach().repeat_interleave(h // g, 1).requires_grad_(True)
            how = " (kv repeated)"
    with sdpa_kernel(backend):
        def fwd():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)

        f_ms = timed(fwd)
        o = fwd()
        dout = torch.randn_like(o)
        b_ms = timed(lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True))
    return f_ms, b_ms, how


def speed_line(label, name, f_ms, b_ms, flops):
    return (
        f"speed {label:<38} {name:<24} forward {flops / f_ms / 1e9:>6.1f} TFLOP/s ({f_ms:.3f} ms)"
        f"  backward {2.5 * flops / b_ms / 1e9:>6.1f} TFLOP/s ({b_ms:.3f} ms)"
    )


LINE = re.compile(
    r"^speed (?P<label>.{38}) (?P<name>.{24}) forward\s+(?P<f>[\d.]+) TFLOP/s .*backward\s+(?P<b>[\d.]+) TFLOP/s"
)


def parse(lines):
    rows = []
    for line in lines:
        m = LINE.match(line.rstrip("\n"))
        if m:
            rows.append((m["label"].strip(), m["name"].strip(), float(m["f"]), float(m["b"])))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--planc", help="the Rust speed test's output, for one table")
    args = ap.parse_args()
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}")
    lines = []
    for label, b, h, g, t, d in SHAPES:
        flops = 4 * b * h * t * t * d / 2
        for backend, name in [(SDPBackend.FLASH_ATTENTION, "PyTorch SDPA flash"),
                              (SDPBackend.CUDNN_ATTENTION, "PyTorch SDPA cuDNN")]:
            try:
                f_ms, b_ms, how = measure(backend, b, h, g, t, d)
                line = speed_line(label, name, f_ms, b_ms, flops)
                print(line + how)
                lines.append(line)
            except RuntimeError as e:
                print(f"speed {label:<38} {name:<24} not run: {str(e).splitlines()[0]}")
            torch.cuda.empty_cache()
    if not args.planc:
        return 0
    rows = parse(open(args.planc).read().splitlines()) + parse(lines)
    print("\nforward / backward TFLOP/s, causal, bf16 (one H200 or whatever this is)")
    for label, *_ in SHAPES:
        print(f"  {label}")
        for l, name, f, b in rows:
            if l == label:
                print(f"    {name:<26} {f:>7.1f} {b:>7.1f}")
    issue = {name: (f, b) for l, name, f, b in rows if l == ISSUE}
    ours, fa2 = issue.get("cuDNN deterministic"), issue.get("PyTorch SDPA flash")
    if ours and fa2:
        ok = ours[0] >= fa2[0] and ours[1] >= fa2[1]
        print(f"verdict: planc (cuDNN, deterministic) {ours[0]:.0f}/{ours[1]:.0f} against SDPA flash "
              f"{fa2[0]:.0f}/{fa2[1]:.0f}: {'at least FA2' if ok else 'BELOW FA2'}"
              + (f"; SDPA cuDNN {issue['PyTorch SDPA cuDNN'][0]:.0f}/{issue['PyTorch SDPA cuDNN'][1]:.0f}"
                 if "PyTorch SDPA cuDNN" in issue else ""))
    else:
        print("verdict: missing rows (planc's cuDNN path or SDPA flash did not run at the issue's shape)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
