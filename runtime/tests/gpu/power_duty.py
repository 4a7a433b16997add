"""power_duty.py: the duty-cycle harness power_operands.py and power_memory.py share.

Work runs for a duty of every 10 ms and the host sleeps for the rest, so the board stays
under its power limit at its boost clock; nvidia-smi's power and clock are sampled every
100 ms (power_phases.sampler) and their medians taken over each run's second half.
"""
import argparse
import statistics
import threading
import time

import torch

from power_phases import sampler


def arguments(description):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--duty", type=float, default=0.3)
    ap.add_argument("--json")
    return ap.parse_args()


class Board:
    """The sampler running, and the idle power measured first."""

    def __init__(self, seconds):
        self.rows, self.stop = [], threading.Event()
        threading.Thread(target=sampler, args=(self.rows, self.stop), daemon=True).start()
        time.sleep(0.5)
        start = time.time()
        time.sleep(seconds)
        self.idle = self.median(start, time.time())[1]

    def median(self, start, end):
        """(SM clock, power) over the second half of [start, end]."""
        half = [r for r in self.rows if start + (end - start) / 2 <= r[0] <= end]
        return statistics.median(c for _, c, _ in half), statistics.median(p for _, _, p in half)

    def duty(self, launch, seconds, duty, period=0.010):
        """Runs `launch` for `duty` of every `period` over `seconds`: (launches, wall, clock, power)."""
        for _ in range(5):
            launch()
        torch.cuda.synchronize()
        launches, start = 0, time.time()
        while time.time() - start < seconds:
            s = time.time()
            while time.time() - s < duty * period:
                launch()
                launches += 1
                torch.cuda.synchronize()
            rest = period - (time.time() - s)
            if rest > 0:
                time.sleep(rest)
        end = time.time()
        clock, power = self.median(start, end)
        return launches, end - start, clock, power
