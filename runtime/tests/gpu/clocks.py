#!/usr/bin/env python3
"""clocks.py: the SM clock, power and temperature a lent GPU ran at during each named run.

    python3 clocks.py sample OUT.csv        # samples nvidia-smi every 200 ms until killed
    python3 clocks.py report OUT.csv MARKS  # one line per run: median clock, power, temperature

MARKS holds `start NAME T` and `end NAME T` lines (unix seconds), as unseen.sh writes them
with MARKS=file. The median over a run's second half is taken, after its start-up (context,
NVRTC, data) and first steps, when the GPU has reached the state its steps keep: that is the
clock a step's kernels ran at, to set beside the clock the profile's probes ran at.
"""
import statistics
import subprocess
import sys
import time


def sample(path):
    q = "timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu"
    with open(path, "w") as f:
        p = subprocess.Popen(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits",
                              "-lms", "200"], stdout=subprocess.PIPE, text=True)
        for line in p.stdout:
            f.write(f"{time.time():.3f},{line}")
            f.flush()


def report(path, marks):
    rows = []
    for line in open(path):
        parts = [x.strip() for x in line.split(",")]
        try:
            rows.append((float(parts[0]), float(parts[2]), float(parts[3]), float(parts[4]),
                         float(parts[5])))
        except (ValueError, IndexError):
            continue
    starts, ends = {}, {}
    for line in open(marks):
        kind, name, t = line.split()
        (starts if kind == "start" else ends)[name] = float(t)
    print(f"{'run':36} {'SM MHz':>7} {'min':>6} {'W':>6} {'°C':>4} {'util %':>6}")
    for name, t0 in starts.items():
        t1 = ends.get(name)
        if t1 is None:
            continue
        mid = t0 + (t1 - t0) / 2
        sel = [r for r in rows if mid <= r[0] <= t1 and r[4] > 50]
        if not sel:
            print(f"{name:36} no busy samples")
            continue
        med = lambda i: statistics.median(r[i] for r in sel)
        print(f"{name:36} {med(1):7.0f} {min(r[1] for r in sel):6.0f} {med(2):6.0f} "
              f"{med(3):4.0f} {med(4):6.0f}")


if __name__ == "__main__":
    if sys.argv[1] == "sample":
        sample(sys.argv[2])
    else:
        report(sys.argv[2], sys.argv[3])
