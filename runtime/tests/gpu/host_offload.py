"""The host side of offloaded training on one GPU: the figures behind the catalog's
`host_link_gbs` and `host_memory_gbs_per_gpu` (compiler/catalog/gpus.toml), which
`compiler/src/cost/offload.rs` prices `parallel.offload` with.

Measures
- the GPU's link to its host: pinned host-to-device and device-to-host copies of 256 MiB
  and 1 GiB, each direction alone and both at once (offloaded weights come up while
  gradients go down);
- the CPU's Adam step over 256 M fp32 parameters, as a rate in parameters/s and in bytes of
  host memory per second at the 30 bytes a parameter cost::offload counts: DeepSpeed's CPU
  Adam when `deepspeed` imports (the kernel DeepSpeed's offload runs), and PyTorch's
  `torch.optim.AdamW(foreach=True)` on the CPU for comparison; the cores used are printed
  (a lent machine is a slice of its host: compare per core, not against the whole node's
  memory channels);
- a STREAM-like triad over 1 GiB arrays with every core, the host memory rate this slice
  reaches.

Run on a lent machine: python3 runtime/tests/gpu/host_offload.py  (writes $OUT/host_offload.json)
"""
import json, os, time
import torch

dev = torch.device("cuda")


def gpu_copy(src, dst, iters=10):
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        dst.copy_(src, non_blocking=True)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def link():
    out = []
    for mib in (256, 1024):
        n = mib << 20
        host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        host2 = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        gpu = torch.empty(n, dtype=torch.uint8, device=dev)
        gpu2 = torch.empty(n, dtype=torch.uint8, device=dev)
        up = gpu_copy(host, gpu)
        down = gpu_copy(gpu, host)
        # Both directions at once, on two streams.
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(10):
            with torch.cuda.stream(s1):
                gpu.copy_(host, non_blocking=True)
            with torch.cuda.stream(s2):
                host2.copy_(gpu2, non_blocking=True)
        torch.cuda.synchronize()
        both = (time.perf_counter() - t) / 10
        out.append({"mib": mib, "h2d_gbs": n / up / 1e9, "d2h_gbs": n / down / 1e9,
                    "both_each_gbs": n / both / 1e9})
    return out


def cpu_adam(n=256 << 20, iters=5):
    out = []
    p = torch.zeros(n, dtype=torch.float32)
    p.grad = torch.ones(n, dtype=torch.float32)
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        opt = DeepSpeedCPUAdam([p], lr=1e-4)
        opt.step()
        t = time.perf_counter()
        for _ in range(iters):
            opt.step()
        s = (time.perf_counter() - t) / iters
        out.append({"kernel": "DeepSpeedCPUAdam", "params_per_s": n / s,
                    "host_gbs_at_30_bytes": 30 * n / s / 1e9})
    except Exception as e:  # noqa: BLE001 - report why it did not run
        out.append({"kernel": "DeepSpeedCPUAdam", "error": repr(e)[:200]})
    opt = torch.optim.AdamW([p], lr=1e-4, foreach=True)
    opt.step()
    t = time.perf_counter()
    for _ in range(iters):
        opt.step()
    s = (time.perf_counter() - t) / iters
    out.append({"kernel": "torch.optim.AdamW(foreach)", "params_per_s": n / s,
                "host_gbs_at_30_bytes": 30 * n / s / 1e9})
    return out


def triad(n=128 << 20, iters=5):
    a, b, c = (torch.ones(n, dtype=torch.float64) for _ in range(3))
    torch.add(b, c, alpha=3.0, out=a)
    t = time.perf_counter()
    for _ in range(iters):
        torch.add(b, c, alpha=3.0, out=a)
    s = (time.perf_counter() - t) / iters
    return {"bytes": 3 * 8 * n, "gbs": 3 * 8 * n / s / 1e9}


result = {
    "device": torch.cuda.get_device_name(0),
    "cpu_threads": torch.get_num_threads(),
    "cpus": os.cpu_count(),
    "link": link(),
    "cpu_adam": cpu_adam(),
    "triad": triad(),
}
print(json.dumps(result, indent=1))
out = os.environ.get("OUT")
if out:
    with open(os.path.join(out, "host_offload.json"), "w") as f:
        json.dump(result, f, indent=1)
