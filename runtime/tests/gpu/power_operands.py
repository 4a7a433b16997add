#!/usr/bin/env python3
"""power_operands.py: what a product draws by its shape and by the values it multiplies.

    python3 power_operands.py [--seconds 3] [--duty 0.3] [--json OUT.json]

power_demand.py found the board linear below its limit, 1.07 W per TFLOP/s of 8192^3 bf16
products on random normal operands; a model built on it put GPT-2 at 724 W where it drew
533. This separates the two suspects at one duty (the rest of every 10 ms idle, under the
limit): the product's shape (GPT-2's and GPT 1.3B's layers against the 8192^3 square) and
its operands (random normal, as calibration uses, against a trained layer's kind of values:
weights N(0, 0.02), activations after GELU, gradients of small magnitude, and a half-zero
operand). Each run prints its power, clock and achieved rate, and the watts over idle per
TFLOP/s.
"""
import json

import torch
import torch.nn.functional as F

from power_duty import Board, arguments


def operands(kind, m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    if kind == "trained":
        a = F.gelu(a)  # an MLP's activations
        b = b * 0.02  # initialised weights
    elif kind == "half_zero":
        a = torch.relu(a)
    elif kind == "zeros":
        a.zero_()
        b.zero_()
    return a, b


def main():
    args = arguments("power by a product's shape and operands")
    board = Board(args.seconds)
    print(f"power_operands: idle {board.idle:.1f} W", flush=True)
    cases = [("8192^3", 8192, 8192, 8192, k) for k in ("random", "trained", "half_zero", "zeros")]
    cases += [
        ("GPT-2 qkv 16384x2304x768", 16384, 2304, 768, "random"),
        ("GPT-2 fc2 16384x768x3072", 16384, 768, 3072, "random"),
        ("GPT-2 fc1 16384x3072x768", 16384, 3072, 768, "random"),
        ("GPT 1.3B fc1 16384x8192x2048", 16384, 8192, 2048, "random"),
        ("GPT 1.3B fc1 16384x8192x2048", 16384, 8192, 2048, "trained"),
        ("Llama 8B fc1 8192x14336x4096", 8192, 14336, 4096, "random"),
    ]
    out = [{"name": "idle", "power_w": board.idle}]
    for name, m, n, k, kind in cases:
        a, b = operands(kind, m, n, k)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        launches, wall, clock, power = board.duty(lambda: torch.matmul(a, b, out=c), args.seconds, args.duty)
        tflops = launches * 2.0 * m * n * k / wall / 1e12
        r = {"name": name, "operands": kind, "power_w": power, "clock_mhz": clock, "tflops": tflops,
             "w_per_tflops": (power - board.idle) / tflops}
        out.append(r)
        print(f"power_operands: {name:30s} {kind:9s} {power:6.1f} W {clock:5.0f} MHz {tflops:6.1f} TFLOP/s "
              f"{r['w_per_tflops']:.3f} W per TFLOP/s over idle", flush=True)
        del a, b, c
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
