"""fp8 against bf16 matrix products on one GPU: the figure `compiler/src/cost/fp8.rs` prices
fp8 products with (today the catalog's bf16 `gemm_efficiency` at the fp8 peak).

Times `torch._scaled_mm` (e4m3 x e4m3 -> bf16, per-tensor scales: what Transformer Engine's
delayed scaling runs through cuBLASLt) beside `torch.matmul` in bf16, at 8192^3 and at the
shapes of a Llama 3 8B layer (8192 tokens: qkv 8192x6144x4096, out 8192x4096x4096, up
8192x28672x4096, down 8192x4096x14336), in bursts and after 60 s of continuous products
(the sustained clock), and prints each as TFLOP/s and as a fraction of the dense peak
(989.4 bf16, 1978.9 fp8 on H100/H200 SXM).

Run on a lent machine: python3 runtime/tests/gpu/fp8_gemm.py  (writes $OUT/fp8_gemm.json)
"""
import json, os, time
import torch

dev = torch.device("cuda")
PEAK = {"bf16": 989.4e12, "fp8": 1978.9e12}
SHAPES = [(8192, 8192, 8192), (8192, 6144, 4096), (8192, 4096, 4096), (8192, 28672, 4096),
          (8192, 4096, 14336)]


def timed(fn, iters=50):
    fn()
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def probes():
    out = []
    one = torch.ones((), device=dev)
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        bf16 = timed(lambda: torch.matmul(a, b.t()))
        fp8 = timed(lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one,
                                             out_dtype=torch.bfloat16))
        flops = 2.0 * m * n * k
        out.append({"m": m, "n": n, "k": k,
                    "bf16_tflops": flops / bf16 / 1e12, "bf16_of_peak": flops / bf16 / PEAK["bf16"],
                    "fp8_tflops": flops / fp8 / 1e12, "fp8_of_peak": flops / fp8 / PEAK["fp8"]})
    return out


burst = probes()
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
t = time.time()
while time.time() - t < 60:
    torch.matmul(a, a)
torch.cuda.synchronize()
sustained = probes()
result = {"device": torch.cuda.get_device_name(0), "burst": burst, "sustained": sustained}
print(json.dumps(result, indent=1))
out = os.environ.get("OUT")
if out:
    with open(os.path.join(out, "fp8_gemm.json"), "w") as f:
        json.dump(result, f, indent=1)
