#!/usr/bin/env python3
"""power_memory.py: what the board draws per byte for the memory-bound kernels of a step.

    python3 power_memory.py [--seconds 3] [--duty 0.3] [--json OUT.json]

power_demand.py priced streaming adds at 122 W per TB/s over idle; GPT 1.3B holds a higher
clock at the power limit than a mix of products and those adds at its share of the product
rate. This times, at one duty (the rest of every 10 ms idle, under the limit), the
memory-bound kernels GPT 1.3B's step runs between its products, at its shapes, against the
add: the standard attention's softmax over 8 x 16 heads of 2048^2 scores, LayerNorm over
16384 rows of 2048, GELU over 16384 x 8192, a copy. Each run prints its power and the watts
over idle per TB/s it moved (read plus written).
"""
import json

import torch
import torch.nn.functional as F

from power_duty import Board, arguments


def kernels():
    """(name, launch, bytes moved a launch)."""
    e = 2
    x = torch.randn(8 * 16, 2048, 2048, device="cuda", dtype=torch.bfloat16)
    h = torch.randn(16384, 2048, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(2048, device="cuda", dtype=torch.bfloat16)
    m = torch.randn(16384, 8192, device="cuda", dtype=torch.bfloat16)
    a = torch.randn(128 * 1024 * 1024 // e, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    out = torch.empty_like(a)
    return [
        ("add 3 x 128 MiB", lambda: torch.add(a, b, out=out), 3 * a.numel() * e),
        ("copy 2 x 128 MiB", lambda: out.copy_(a), 2 * a.numel() * e),
        ("softmax 128 x 2048^2", lambda: torch.softmax(x, dim=-1), 2 * x.numel() * e),
        ("layernorm 16384 x 2048", lambda: F.layer_norm(h, (2048,), w, w), 2 * h.numel() * e),
        ("gelu 16384 x 8192", lambda: F.gelu(m), 2 * m.numel() * e),
    ]


def main():
    args = arguments("power per byte of a step's memory-bound kernels")
    board = Board(args.seconds)
    print(f"power_memory: idle {board.idle:.1f} W", flush=True)
    result = [{"name": "idle", "power_w": board.idle}]
    for name, launch, moved in kernels():
        launches, wall, clock, power = board.duty(launch, args.seconds, args.duty)
        tbytes = launches * moved / wall / 1e12
        r = {"name": name, "power_w": power, "clock_mhz": clock, "tbytes": tbytes,
             "w_per_tbs": (power - board.idle) / tbytes}
        result.append(r)
        print(f"power_memory: {name:24s} {power:6.1f} W {tbytes:5.2f} TB/s "
              f"{r['w_per_tbs']:6.1f} W per TB/s over idle", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
