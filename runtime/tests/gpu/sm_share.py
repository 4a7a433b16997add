"""What a matrix product loses while another kernel holds some of the GPU's SMs.

NCCL runs each channel of a collective as one resident block of several hundred threads for as
long as the collective lasts, whatever link it moves data over, and a cuBLAS product launched
beside it gets only the SMs that are left (one of its blocks fills an SM's registers). This
times products and a copy alone and beside a spinning kernel whose blocks hold K SMs (each
block reads its SM from %smid, so the SMs held are counted, not assumed), and prints each
one's time over its time alone next to SMs / (SMs - K), the slowdown if only the SMs left
mattered.

    python sm_share.py [OUT.json] [--no-smid] [--fp8]

`--fp8` adds E4M3 products with fast and with split accumulation (what Transformer Engine
runs forward and backward).

The last line of stdout is the JSON.
"""

import json
import sys
import time

import torch
import triton
import triton.language as tl


@triton.jit
def spin(flag):
    """Polls `flag` until it is set; the polls it took."""
    n = 0
    go = tl.load(flag, volatile=True)
    while go == 0:
        go = tl.load(flag, volatile=True)
        n += 1
    return n


@triton.jit
def hold(flag, smids, spins):
    pid = tl.program_id(0)
    one = tl.arange(0, 1)
    sm = tl.inline_asm_elementwise(
        "mov.u32 $0, %smid;", "=r,r", [one], dtype=tl.int32, is_pure=False, pack=1
    )
    tl.store(smids + pid + one, sm)
    tl.store(spins + pid, spin(flag))


@triton.jit
def hold_unread(flag, smids, spins):
    pid = tl.program_id(0)
    tl.store(smids + pid, pid)
    tl.store(spins + pid, spin(flag))


HOLD = hold


def beside(k, work, iters):
    """Seconds one `work()` takes on its own stream while `k` blocks of `hold` spin."""
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    smids = torch.full((max(k, 1),), -1, dtype=torch.int32, device="cuda")
    spins = torch.zeros(max(k, 1), dtype=torch.int64, device="cuda")
    side, main, release = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    if k:
        with torch.cuda.stream(side):
            HOLD[(k,)](flag, smids, spins, num_warps=16)
        time.sleep(0.02)  # the spinning blocks are resident before the work is queued
    start, end = (
        torch.cuda.Event(enable_timing=True),
        torch.cuda.Event(enable_timing=True),
    )
    with torch.cuda.stream(main):
        start.record()
        for _ in range(iters):
            work()
        end.record()
    end.synchronize()
    with torch.cuda.stream(release):
        flag.fill_(1)
    torch.cuda.synchronize()
    held = len(set(smids.tolist()) - {-1}) if k else 0
    return start.elapsed_time(end) / 1e3 / iters, held


def main():
    global HOLD
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if "--no-smid" in sys.argv:  # a Triton whose inline assembly fails: blocks as SMs
        HOLD = hold_unread
    torch.manual_seed(0)
    works = {}
    for m, n, k in [(8192, 8192, 8192), (8192, 4096, 4096), (16384, 3072, 768)]:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        works[f"bf16 product {m}x{n}x{k}"] = (lambda a=a, b=b: torch.mm(a, b), 20)
    x = torch.empty(2**29, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    works["copy 1 GiB"] = (lambda: y.copy_(x), 20)
    if "--fp8" in sys.argv:
        # E4M3 products as Transformer Engine runs them: the forward's with fast
        # accumulation, the gradients' with the split (promoted) accumulator.
        one = torch.ones((), device="cuda")
        for m, n, k in [(8192, 4096, 4096), (8192, 28672, 4096)]:
            a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
            b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
            for fast in (True, False):
                acc = "fast" if fast else "split"
                works[f"fp8 {acc} {m}x{n}x{k}"] = (
                    lambda a=a, b=b, fast=fast: torch._scaled_mm(
                        a,
                        b,
                        scale_a=one,
                        scale_b=one,
                        out_dtype=torch.bfloat16,
                        use_fast_accum=fast,
                    ),
                    20,
                )
    for fn, iters in works.values():  # warm up: cuBLAS's choice and clocks
        beside(0, fn, iters)
    rows = []
    for name, (fn, iters) in works.items():
        # Each point the fastest of three, the ones alone taken between the others, so
        # that the board's clock drifting under load does not read as a loss.
        alone = min(beside(0, fn, iters)[0] for _ in range(3))
        for k in [0, 4, 8, 16, 24, 32, 48, 66]:
            t, held = min(beside(k, fn, iters) for _ in range(3))
            row = {
                "work": name,
                "blocks": k,
                "sms_held": held,
                "seconds": t,
                "slowdown": t / alone,
                "sms_left_ratio": sms / (sms - held),
            }
            rows.append(row)
            print(
                f"{name:34s} K={k:3d} held {held:3d} SMs: {t * 1e3:8.3f} ms, "
                f"x{t / alone:.3f} (SMs left: x{sms / (sms - held):.3f})",
                flush=True,
            )
    result = {"device": torch.cuda.get_device_name(0), "sms": sms, "rows": rows}
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    if paths:
        with open(paths[0], "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
