"""ncu_sum.py: Nsight Compute's `--csv` output summed per kernel: launches, time per step (the
run's two steps halved), mean time a launch and the other metrics' means (DRAM throughput,
issue slots and warps active, in % of peak; DRAM megabytes a launch). ncu_kernels.sh writes
its input.

Run: python3 ncu_sum.py ncu.csv
"""
import csv, sys, collections
rows = collections.defaultdict(lambda: collections.defaultdict(list))
lines = open(sys.argv[1], errors="replace").read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
for r in csv.DictReader(lines[start:]):
    k = r["Kernel Name"][:40]
    try: v = float(r["Metric Value"].replace(",", ""))
    except: continue
    u = r["Metric Unit"]
    if r["Metric Name"] == "gpu__time_duration.sum":
        v *= {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(u, 1.0); u = "us"
    if r["Metric Name"] == "dram__bytes.sum":
        v *= {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3, "B": 1e-6, "KB": 1e-3, "MB": 1.0, "GB": 1e3}.get(u, 1.0); u = "MB"
    rows[k][(r["Metric Name"], u)].append(v)
out = []
for k, m in rows.items():
    d = [v for (n, u), v in m.items() if n == "gpu__time_duration.sum"]
    d = d[0] if d else []
    tot = sum(d) / 2  # two steps
    mean = sum(d) / max(len(d), 1)
    o = {"mean_us": mean}
    out.append((tot, k, len(d), o | {n.split("__")[1][:28]: sum(v)/len(v) for (n, u), v in m.items() if n != "gpu__time_duration.sum"}))
for tot, k, c, o in sorted(out, reverse=True):
    print(f"{k:40s} n={c:4d} per step={tot:8.1f}us " + " ".join(f"{n}={v:.1f}" for n, v in o.items()))
