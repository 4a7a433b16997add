#!/usr/bin/env python3
"""gemm_tuning.py: what choosing each product's cuBLAS algorithm by timing would buy.

    python3 runtime/tests/gpu/gemm_tuning.py [--json OUT]

planc's runtime calls cublasGemmEx with CUBLAS_GEMM_DEFAULT: cuBLAS's heuristic picks the
kernel. PyTorch's TunableOp times the candidate cuBLAS and cuBLASLt kernels of each shape
and keeps the fastest. This times the linear layers' products of issue 26's speed plans
(forward Y = X W^T, input gradient dX = dY W, weight gradient dW = dY^T X), bf16, both ways,
and sums each plan's step (every layer's three products, the output layer's three) so the
gain can be weighed before any kernel selection is built into the runtime. Times are
medians of 10 after 3 warm-ups (sdpa_rates.py's timing).
"""
import json
import os
import sys
import tempfile

import torch

from sdpa_rates import median_ms  # the same timing: medians after warm-ups, by events

PLANS = {
    # name: (tokens, layers, [(in, out)], head (in, vocab))
    "gpt2-124m 16x1024": (16384, 12, [(768, 2304), (768, 768), (768, 3072), (3072, 768)], (768, 50304)),
    "llama3.2-1b 4x2048": (8192, 16, [(2048, 3072), (2048, 2048), (2048, 16384), (8192, 2048)], (2048, 128256)),
    "gpt-6.6b 1x2048": (2048, 32, [(4096, 12288), (4096, 4096), (4096, 16384), (16384, 4096)], (4096, 50304)),
}


def products(tokens, i, o):
    x = torch.randn(tokens, i, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(o, i, device="cuda", dtype=torch.bfloat16) * 0.02
    dy = torch.randn(tokens, o, device="cuda", dtype=torch.bfloat16)
    return {
        "fwd": lambda: x @ w.t(),
        "dgrad": lambda: dy @ w,
        "wgrad": lambda: dy.t() @ x,
    }


def time_all(label):
    out = {}
    for name, (tokens, layers, shapes, head) in PLANS.items():
        rows = []
        for (i, o), n in [(s, layers) for s in shapes] + [(head, 1)]:
            for kind, fn in products(tokens, i, o).items():
                ms = median_ms(fn)
                rows.append({"in": i, "out": o, "kind": kind, "count": n, "ms": ms,
                             "tflops": 2 * tokens * i * o / ms / 1e9})
        out[name] = rows
        torch.cuda.empty_cache()
    return out


def main():
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    default = time_all("default")
    t = torch.cuda.tunable
    t.set_filename(os.path.join(tempfile.mkdtemp(), "tunableop_results%d.csv"))
    t.enable(True)
    t.tuning_enable(True)
    t.set_max_tuning_duration(100)
    time_all("tuning")  # the first call of each shape tunes it
    t.tuning_enable(False)
    tuned = time_all("tuned")
    t.enable(False)
    report = {}
    for name in PLANS:
        a = sum(r["ms"] * r["count"] for r in default[name])
        b = sum(r["ms"] * r["count"] for r in tuned[name])
        print(f"{name}: products {a:.2f} ms a step by cuBLAS's heuristic, {b:.2f} ms tuned ({a / b:.3f}x)")
        for r0, r1 in zip(default[name], tuned[name]):
            print(f"   {r0['in']:>6}->{r0['out']:<6} {r0['kind']:<5} x{r0['count']:<3} "
                  f"{r0['ms']:8.3f} ms {r0['tflops']:6.1f} TFLOP/s   tuned {r1['ms']:8.3f} ms {r1['tflops']:6.1f}")
        report[name] = {"default": default[name], "tuned": tuned[name]}
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
