"""cuda_timing.py: the GPU time of a call, from CUDA events around `n` calls in a row (the
measurement scripts beside it import it; run them from this folder or by their path)."""
import torch


def seconds_per_call(fn, n):
    """Seconds a call of `fn` takes on the current stream, over `n` calls back to back, with
    no warm-up: a caller that wants one runs `fn` first."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / n


def median_ms(fn, reps=10):
    """Milliseconds of one call of `fn`, the median of `reps` calls each between its own
    events, after three warm-up calls."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]
