"""ncu_sum.py: Nsight Compute's `--csv` output of a run's two steps, summed per kernel: its
launches, its time a step (the two steps' total halved) and a launch, and the means over its
launches of DRAM throughput and the issue slots and warps active (% of peak) and of the DRAM
megabytes a launch moves. ncu_kernels.sh writes the input.

Run: python3 ncu_sum.py ncu.csv
"""
import collections
import csv
import sys

STEPS = 2
TIME = "gpu__time_duration.sum"
# Each metric's column label and its scale to the label's unit, by the unit ncu prints.
SCALE = {
    TIME: ("us", {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}),
    "dram__bytes.sum": ("MB", {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}),
}
LABEL = {
    "dram__bytes.sum": "DRAM MB",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM %",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue %",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "warps %",
}


def main(path):
    lines = open(path, errors="replace").read().splitlines()
    header = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if header is None:
        sys.exit(f"{path}: no ncu CSV table (did ncu fail? see its stderr)")
    values = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in csv.DictReader(lines[header:]):
        name, raw = r["Metric Name"], r["Metric Value"].replace(",", "")
        try:
            v = float(raw)
        except ValueError:
            continue  # "n/a" where a metric could not be read
        if name in SCALE:
            v *= SCALE[name][1].get(r["Metric Unit"], 1.0)
        values[r["Kernel Name"][:40]][name].append(v)
    rows = []
    for kernel, m in values.items():
        t = m.get(TIME, [])
        cols = [f"{LABEL.get(n, n)} {sum(v) / len(v):.1f}" for n, v in m.items() if n != TIME]
        rows.append((sum(t) / STEPS, kernel, len(t), sum(t) / max(len(t), 1), cols))
    for step, kernel, n, each, cols in sorted(rows, reverse=True):
        print(f"{kernel:40s} n={n:4d} {step:8.1f} us a step {each:7.1f} us a launch  " + "  ".join(cols))


if __name__ == "__main__":
    main(sys.argv[1])
