"""moe_products.py: the rate of an MoE layer's expert products on this GPU, against the
dense product planc prices them at (issue 24: each local expert's product is priced as a
product of its own shape, `count x gemm(m, n, k)` in compiler/src/cost/time.rs).

For each shape (local experts, rows an expert, hidden, expert FFN) it times the forward
products of one layer (up: rows x h . h x 2f, SwiGLU's two halves in one; down: rows x f .
f x h), bf16, CUDA events, 20 timed after 5 warm-up:
  - dense1: one product of an expert's own shape, times the experts (what planc prices);
  - loop:   one torch.matmul an expert on one stream (Megatron-Core's SequentialMLP);
  - loop4:  the same over four streams (Transformer Engine's GroupedLinear issues its
            products to several streams);
  - grouped: torch._grouped_mm, one grouped kernel, where torch has it, with equal rows and
            with the rows of a binomial routing draw (what a dropless router hands out);
  - dense:  one product of all the rows with one expert's weights (the same FLOPs in one).
Prints TFLOP/s (the useful FLOPs of equal rows) for each.

Run: python3 moe_products.py
"""
import torch

from cuda_timing import seconds_per_call

SHAPES = [
    # name, local experts, rows an expert, hidden, expert ffn
    ("gpt-oss-120b, ep 8: 16 local, 4096 tok x top 4", 16, 1024, 2880, 2880),
    ("mixtral-8x7b, ep 8: 1 local, 4096 tok x top 2", 1, 8192, 4096, 14336),
    ("qwen3-30b-a3b, ep 16: 8 local, 4096 tok x top 8", 8, 4096, 2048, 768),
    ("deepseek-v3-like, ep 64: 4 local, 4096 tok x top 8", 4, 2048, 7168, 2048),
    ("mixtral-8x7b, ep 1: 8 local, 4096 tok x top 2", 8, 1024, 4096, 14336),
]


def timed(fn, reps=20):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    return seconds_per_call(fn, reps)


def main():
    dev = torch.device("cuda")
    dt = torch.bfloat16
    torch.manual_seed(0)
    print(torch.__version__, torch.cuda.get_device_name())
    has_grouped = hasattr(torch, "_grouped_mm")
    streams = [torch.cuda.Stream() for _ in range(4)]
    for name, e, rows, h, f in SHAPES:
        for what, k, n in (("up", h, 2 * f), ("down", f, h)):
            x = torch.randn(e * rows, k, device=dev, dtype=dt)
            # _grouped_mm wants the weights' last dimension contiguous as B^T: [e, n, k]^T.
            w = torch.randn(e, n, k, device=dev, dtype=dt).transpose(-2, -1)
            flops = 2.0 * e * rows * k * n
            xs = x.view(e, rows, k)
            res = {}
            res["dense1"] = timed(lambda: torch.matmul(xs[0], w[0])) * e
            res["loop"] = timed(lambda: [torch.matmul(xs[i], w[i]) for i in range(e)])

            def loop4():
                cur = torch.cuda.current_stream()
                for s in streams:
                    s.wait_stream(cur)
                for i in range(e):
                    with torch.cuda.stream(streams[i % 4]):
                        torch.matmul(xs[i], w[i])
                for s in streams:
                    cur.wait_stream(s)

            res["loop4"] = timed(loop4)
            if has_grouped and e > 1:
                offs = torch.arange(rows, e * rows + 1, rows, device=dev, dtype=torch.int32)
                try:
                    res["grouped"] = timed(lambda: torch._grouped_mm(x, w, offs=offs))
                    # A dropless router's draw: multinomial over equal experts, same total.
                    counts = torch.distributions.Multinomial(
                        e * rows, torch.ones(e)
                    ).sample().to(torch.int64)
                    offs_r = torch.cumsum(counts, 0).to(device=dev, dtype=torch.int32)
                    res["grouped-drawn"] = timed(lambda: torch._grouped_mm(x, w, offs=offs_r))
                except Exception as err:  # noqa: BLE001
                    print(f"  _grouped_mm refused: {err}")
            wd = w[0]
            res["dense"] = timed(lambda: torch.matmul(x, wd))
            line = "  ".join(f"{kn} {flops / s / 1e12:6.1f}" for kn, s in res.items())
            print(f"{name:52s} {what:4s} {e}x[{rows}x{k}.{k}x{n}]  TFLOP/s: {line}", flush=True)


if __name__ == "__main__":
    main()
