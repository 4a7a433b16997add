#!/usr/bin/env python3
"""power_phases.py: how much a board's power limit slows products by the length of their phases.

    python3 power_phases.py [--size 4096] [--duties 0.5 ...] [--seconds 4] [--json OUT.json]

`planc calibrate`'s power curve mixes long products (8192-square, ~1.4 ms each, several in a
row) with long streaming adds at a share of the tensor cores' burst rate, and finds products
slowed at every share (1.15x at 30 % on one H200), while training steps at the same share ran
their products at burst speed (GPT-2, GPT 1.3B) or 10-13 % slower (Llama-class steps, whose
products and fused attention run back to back for several ms). This measures the other
variable: at a fixed duty of products (`--duties`, 0.5 by default), phases of products lasting
0.1 to 10 ms alternate with streaming adds filling the rest, for `--seconds` each; for each phase length it prints the
products' and the adds' time against their bursts, and the SM clock and board power sampled
through nvidia-smi over the run's second half. If the slowdown grows with the phase length at
one share, the limiter acts over a window of that order, and a plan's power slowdown depends
on how long its products run back to back, not only on its share.
"""
import argparse
import json
import statistics
import subprocess
import threading
import time

import torch

from cuda_timing import seconds_per_call as timed


def sampler(rows, stop):
    q = "clocks.sm,power.draw"
    p = subprocess.Popen(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits",
                          "-lms", "100"], stdout=subprocess.PIPE, text=True)
    while not stop.is_set():
        line = p.stdout.readline()
        if not line:
            break
        try:
            clock, power = (float(x) for x in line.split(",")[:2])
        except ValueError:
            continue
        rows.append((time.time(), clock, power))
    p.terminate()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--json")
    ap.add_argument("--size", type=int, default=4096, help="the products' square size")
    ap.add_argument("--duties", type=float, nargs="+", default=[0.5],
                    help="shares of the time in products (the rest in adds)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    n = args.size
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
    x = torch.randn(64 << 20, device=dev, dtype=torch.bfloat16)  # 128 MiB
    y = torch.randn(64 << 20, device=dev, dtype=torch.bfloat16)
    z = torch.empty_like(x)
    prod = lambda: torch.mm(a, b, out=c)
    add = lambda: torch.add(x, y, out=z)
    # Bursts: a few launches after an idle second, so the clock is at its boost.
    for _ in range(20):
        prod(), add()
    torch.cuda.synchronize()
    time.sleep(1.0)
    t_prod = timed(prod, 10)
    time.sleep(1.0)
    t_add = timed(add, 10)
    print(f"{torch.cuda.get_device_name()}: burst product {n}^3 {t_prod*1e3:.3f} ms "
          f"({2*n**3/t_prod/1e12:.0f} TFLOP/s), add of 3 x 128 MiB {t_add*1e3:.3f} ms "
          f"({3*x.numel()*2/t_add/1e9:.0f} GB/s)")
    out = {"device": torch.cuda.get_device_name(), "burst_product_s": t_prod,
           "burst_add_s": t_add, "points": []}
    points = [(d, ms) for d in args.duties for ms in [0.1, 0.3, 1.0, 3.0, 10.0]]
    for duty, phase_ms in points:
        k_prod = max(1, round(phase_ms / 1e3 / t_prod))
        k_add = max(1, round(phase_ms * (1 - duty) / duty / 1e3 / t_add))
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        rows, stop = [], threading.Event()
        th = threading.Thread(target=sampler, args=(rows, stop), daemon=True)
        time.sleep(1.0)
        th.start()
        t0 = time.time()
        prod_s, add_s, phases = [], [], 0
        while time.time() - t0 < args.seconds:
            ev[0].record()
            for _ in range(k_prod):
                prod()
            ev[1].record()
            for _ in range(k_add):
                add()
            ev[2].record()
            phases += 1
            if phases % 8 == 0:
                torch.cuda.synchronize()
                if time.time() - t0 > args.seconds / 2:
                    prod_s.append(ev[0].elapsed_time(ev[1]) / 1e3 / k_prod)
                    add_s.append(ev[1].elapsed_time(ev[2]) / 1e3 / k_add)
        torch.cuda.synchronize()
        stop.set()
        th.join(timeout=2)
        half = [r for r in rows if r[0] > t0 + args.seconds / 2]
        clock = statistics.median(r[1] for r in half) if half else float("nan")
        power = statistics.median(r[2] for r in half) if half else float("nan")
        p = {"duty": duty, "phase_ms": phase_ms, "products_per_phase": k_prod, "adds_per_phase": k_add,
             "product_slowdown": statistics.median(prod_s) / t_prod,
             "add_slowdown": statistics.median(add_s) / t_add,
             "sm_clock_mhz": clock, "power_w": power}
        out["points"].append(p)
        print(f"duty {duty:.2f}, product phases of {phase_ms:5.1f} ms ({k_prod:3d} products, {k_add:3d} adds): products "
              f"{p['product_slowdown']:.3f}x, adds {p['add_slowdown']:.3f}x their bursts; "
              f"{clock:.0f} MHz, {power:.0f} W")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
