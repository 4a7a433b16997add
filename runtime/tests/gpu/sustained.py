"""Burst against sustained rates on one GPU: the figure behind the catalog's
`sustained_clock` (compiler/catalog/gpus.toml).

A matrix product timed in a short burst (the way the catalog's `gemm_efficiency` and the
published FlashAttention rates were measured) runs at the boost clock; a GPU that trains
for minutes sits at its power limit and a lower clock. This times the same bf16 products
(8192^3, and 16384x4096x16384 as a 7B model's layer runs them), the fused attention
(PyTorch SDPA, flash backend) and a device copy, first in bursts after the GPU idled, then
after 60 s of continuous products, sampling the SM clock and power through nvidia-smi.

Run on a lent machine: python3 runtime/tests/gpu/sustained.py  (writes $OUT/sustained.json)
"""
import json, os, subprocess, time
import torch

dev = torch.device("cuda")
torch.backends.cuda.matmul.allow_tf32 = False


def smi():
    q = "clocks.sm,power.draw,temperature.gpu"
    out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.strip().splitlines()[0]
    clk, pw, temp = [float(x) for x in out.split(",")]
    return {"sm_mhz": clk, "watts": pw, "celsius": temp}


def timed(fn, iters):
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def probes():
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    x = torch.randn(16384, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4096, 16384, device=dev, dtype=torch.bfloat16)
    q = torch.randn(8, 32, 2048, 128, device=dev, dtype=torch.bfloat16)
    big = torch.empty(1 << 30, device=dev, dtype=torch.uint8)
    big2 = torch.empty_like(big)
    attn_flops = 4 * 8 * 32 * 2048 * 2048 * 128 / 2  # causal forward

    def sdpa():
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)

    return {
        "gemm_8192_tflops": (lambda: a @ b, 2 * 8192 ** 3 / 1e12),
        "gemm_16384x16384x4096_tflops": (lambda: x @ w, 2 * 16384 * 4096 * 16384 / 1e12),
        "sdpa_flash_causal_fwd_tflops": (sdpa, attn_flops / 1e12),
        "copy_1GiB_tbs": (lambda: big2.copy_(big), 2 * (1 << 30) / 1e12),
    }


def measure(tag, table):
    row = {}
    for name, (fn, work) in table.items():
        fn(); torch.cuda.synchronize()
        s = timed(fn, 20)
        row[name] = work / s
    row.update(smi())
    print(tag, json.dumps(row), flush=True)
    return row


table = probes()
result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
time.sleep(5)
result["burst"] = measure("burst", table)
# Sustained: 60 s of products, sampled every 10 s.
a, b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16), torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
samples = []
t0 = time.time()
while time.time() - t0 < 60:
    s = timed(lambda: a @ b, 400)
    samples.append({"t": round(time.time() - t0, 1), "gemm_8192_tflops": 2 * 8192 ** 3 / s / 1e12, **smi()})
    print("load", json.dumps(samples[-1]), flush=True)
result["under_load"] = samples
result["sustained"] = measure("sustained", table)
out = os.environ.get("OUT", ".")
with open(os.path.join(out, "sustained.json"), "w") as f:
    json.dump(result, f, indent=1)
