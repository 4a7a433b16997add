#!/usr/bin/env python3
"""power_demand.py: what a board draws for tensor-core work and for HBM traffic, below its limit.

    python3 power_demand.py [--seconds 4] [--json OUT.json]

`planc calibrate`'s power curve reads a plan's slowdown at the share of the burst product rate
its step reaches, from mixes of products and streaming adds that all hold the board at its
limit. Training steps at the same share seemed not to draw that much (GPT-2: 533 W of 700 at a
share of ~0.45 over a one-second run, 695 W over a twenty-second one; GPT 1.3B at 1800 MHz
where the 50 % mix held 1650). This measures the power
of each kind of work on its own, at duties low enough to stay under the limit: the board
idle; 8192-square bf16 products, and streaming adds of 3 x 256 MiB, each for a duty of every
10 ms (the rest idle: the host sleeps); and the two mixed. Power and SM clock are
nvidia-smi's medians over each run's second half; each run also reports its achieved
FLOP and byte rates, so a linear model P = P_idle + a * FLOP/s + b * bytes/s can be read off.
"""
import argparse
import json
import statistics
import threading
import time

import torch

from power_phases import sampler  # nvidia-smi's clock and power every 100 ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    elems = 256 * 1024 * 1024 // 2
    x = torch.randn(elems, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(elems, device="cuda", dtype=torch.bfloat16)
    z = torch.empty(elems, device="cuda", dtype=torch.bfloat16)
    product = lambda: torch.matmul(a, b, out=c)
    add = lambda: torch.add(x, y, out=z)
    flops_per_product, bytes_per_add = 2.0 * n ** 3, 3.0 * elems * 2
    for f in (product, add):
        for _ in range(20):
            f()
    torch.cuda.synchronize()
    rows, stop = [], threading.Event()
    t = threading.Thread(target=sampler, args=(rows, stop), daemon=True)
    t.start()
    time.sleep(0.5)
    results = []

    def run(name, duty_products, duty_adds):
        period = 0.010
        start = time.time()
        products = adds = 0
        busy = 0.0
        while time.time() - start < args.seconds:
            t0 = time.time()
            while time.time() - t0 < duty_products * period:
                product()
                products += 1
                torch.cuda.synchronize()
            t1 = time.time()
            while time.time() - t1 < duty_adds * period:
                add()
                adds += 1
                torch.cuda.synchronize()
            busy += time.time() - t0
            rest = period - (time.time() - t0)
            if rest > 0:
                time.sleep(rest)
        end = time.time()
        half = [r for r in rows if start + (end - start) / 2 <= r[0] <= end]
        wall = end - start
        r = {"name": name, "duty_products": duty_products, "duty_adds": duty_adds,
             "power_w": statistics.median(p for _, _, p in half) if half else None,
             "clock_mhz": statistics.median(c for _, c, _ in half) if half else None,
             "tflops": products * flops_per_product / wall / 1e12,
             "tbytes": adds * bytes_per_add / wall / 1e12,
             "busy": busy / wall}
        results.append(r)
        print(f"power_demand: {name:24s} {r['power_w']:6.1f} W {r['clock_mhz']:6.0f} MHz "
              f"{r['tflops']:6.1f} TFLOP/s {r['tbytes']:5.2f} TB/s busy {r['busy']:.2f}", flush=True)

    start = time.time()
    time.sleep(args.seconds)
    end = time.time()
    half = [r for r in rows if start + (end - start) / 2 <= r[0] <= end]
    idle = {"name": "idle", "power_w": statistics.median(p for _, _, p in half),
            "clock_mhz": statistics.median(c for _, c, _ in half), "tflops": 0.0, "tbytes": 0.0}
    results.append(idle)
    print(f"power_demand: idle {idle['power_w']:.1f} W {idle['clock_mhz']:.0f} MHz", flush=True)
    for d in (0.15, 0.3, 0.5):
        run(f"products {d:.2f}", d, 0.0)
    for d in (0.15, 0.3, 0.5, 1.0):
        run(f"adds {d:.2f}", 0.0, d)
    for d in (0.15, 0.3):
        run(f"products+adds {d:.2f}+{d:.2f}", d, d)
    run("products 1.00", 1.0, 0.0)
    stop.set()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
