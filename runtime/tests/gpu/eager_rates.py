"""How fast PyTorch's eager elementwise kernels move their bytes, beside a plain copy.

planc prices each kernel of an unfused (`job.kernels = eager`) path as a memory-bound pass of
the bytes it reads and writes, at the copy rate its profile measured. PyTorch's own kernels
do not all reach it: a cast between types, a broadcast operand, a row reduction or a
concatenation runs through slower paths of its TensorIterator than a same-type copy.
This script times the kernels a transformers Llama or GPT-2 layer launches under FSDP2 or
autocast, at the shapes of the one-GPU comparison plans (Llama 3.2 1B at 4 x 2048, GPT-2
124M at 16 x 1024), each beside a same-type copy of the same bytes, and prints per kernel
its bytes, its time and its rate as a share of the copy's.

    python eager_rates.py > eager_rates.json

Every tensor stays allocated to the end (under 20 GB), so each case's lambda may keep its
operands without the order of the cases mattering.
"""

import json

import torch

dev = "cuda"
bf, f32 = torch.bfloat16, torch.float32


def timed(fn, reps=50):
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps * 1e-3


def copy_time(nbytes):
    n = int(nbytes // 2)  # a same-type copy moves 2 x its size: read and write
    a = torch.empty(n // 2 * 2, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    return timed(lambda: b.copy_(a))


def cases():
    t, h, f, v = 4 * 2048, 2048, 8192, 128256
    x16 = torch.randn(t, h, device=dev, dtype=bf)
    y16 = torch.randn(t, h, device=dev, dtype=bf)
    x32 = torch.randn(t, h, device=dev, dtype=f32)
    r32 = torch.randn(t, 1, device=dev, dtype=f32)
    w16 = torch.randn(h, device=dev, dtype=bf)
    g16 = torch.randn(t, f, device=dev, dtype=bf)
    u16 = torch.randn(t, f, device=dev, dtype=bf)
    q = torch.randn(4, 32, 2048, 64, device=dev, dtype=bf)
    cos = torch.randn(1, 1, 2048, 64, device=dev, dtype=bf)
    n = x16.numel()
    yield "cast bf16 -> fp32 (norm's upcast)", lambda: x16.to(f32), 6 * n
    yield "cast fp32 -> bf16", lambda: x32.to(bf), 6 * n
    yield "pow(2) fp32", lambda: x32.pow(2), 8 * n
    yield "mean over the row fp32", lambda: x32.mean(-1, keepdim=True), 4 * n
    yield "fp32 x [rows, 1] (broadcast)", lambda: x32 * r32, 8 * n
    yield "[h] x bf16 (weight, broadcast)", lambda: w16 * x16, 4 * n
    yield "bf16 + bf16 (residual)", lambda: x16 + y16, 6 * n
    yield "bf16 x bf16", lambda: x16 * y16, 6 * n
    yield "silu bf16 [t, ffn]", lambda: torch.nn.functional.silu(g16), 4 * g16.numel()
    yield "bf16 x bf16 [t, ffn] (SwiGLU)", lambda: g16 * u16, 6 * g16.numel()
    yield "q x cos (rope, broadcast)", lambda: q * cos, 4 * q.numel()
    yield "cat(-x2, x1) (rope's rotate_half)", lambda: torch.cat(
        (-q[..., 32:], q[..., :32]), dim=-1), 4 * q.numel() + 4 * q.numel() // 2
    yield "q + q (rope's sum)", lambda: q + q, 6 * q.numel()
    logits = torch.randn(t, v, device=dev, dtype=bf)
    yield "logits.float() [t, vocab]", lambda: logits.float(), 6 * logits.numel()
    l32 = torch.randn(t, v, device=dev, dtype=f32)
    yield "log_softmax fp32 [t, vocab]", lambda: torch.log_softmax(l32, -1), 8 * l32.numel()
    out = torch.log_softmax(l32, -1)
    yield "log_softmax backward fp32 [t, vocab]", lambda: torch.ops.aten._log_softmax_backward_data(
        l32, out, -1, f32), 12 * l32.numel()
    # GPT-2 under autocast: 16 x 1024 tokens, hidden 768, ffn 3072; NewGELU's chain in bf16.
    g = torch.randn(16 * 1024, 3072, device=dev, dtype=bf)
    m = g.numel()
    yield "gpt2 pow(x, 3) bf16 [t, ffn]", lambda: torch.pow(g, 3.0), 4 * m
    yield "gpt2 x * 0.5 bf16 (scalar)", lambda: g * 0.5, 4 * m
    yield "gpt2 tanh bf16", lambda: torch.tanh(g), 4 * m
    # GPT-2's standard attention scores, 16 x 12 heads x 1024 x 1024: the causal mask added
    # (one mask a sample, broadcast over the heads), the softmax over the rows, in bf16 (the
    # module's type) and under autocast (an fp32 mask: fp32 out, softmax in fp32).
    sc = torch.randn(16, 12, 1024, 1024, device=dev, dtype=bf)
    m16 = torch.randn(16, 1, 1024, 1024, device=dev, dtype=bf)
    m32 = m16.float()
    k = sc.numel()
    yield "scores + mask bf16 (over the heads)", lambda: sc + m16, 4 * k + 2 * m16.numel()
    yield "scores + mask fp32 (widening)", lambda: sc + m32, 6 * k + 4 * m16.numel()
    yield "softmax bf16 rows of 1024", lambda: torch.softmax(sc, -1), 4 * k
    p16 = torch.softmax(sc, -1)
    yield "softmax backward bf16 rows of 1024", lambda: torch.ops.aten._softmax_backward_data(
        sc, p16, -1, bf), 6 * k
    s32 = sc.float()
    yield "softmax fp32 rows of 1024", lambda: torch.softmax(s32, -1), 8 * k
    p32 = torch.softmax(s32, -1)
    yield "softmax backward fp32 rows of 1024", lambda: torch.ops.aten._softmax_backward_data(
        s32, p32, -1, f32), 12 * k
    a32 = torch.randn(16 * 1024, 768, device=dev, dtype=f32)
    yield "gpt2 layer_norm fp32 [t, 768]", lambda: torch.nn.functional.layer_norm(
        a32, (768,)), 8 * a32.numel()
    w32 = torch.ones(768, device=dev, dtype=f32, requires_grad=True)
    a32.requires_grad_(True)
    y = torch.nn.functional.layer_norm(a32, (768,), w32)
    gy = torch.randn_like(y)
    # Backward reads the input and the output's gradient, writes the input's (planc: 3 x 4 +
    # the weight's partial sums, priced as 2 x 4 more).
    yield "gpt2 layer_norm backward fp32 [t, 768]", lambda: torch.autograd.grad(
        y, (a32, w32), gy, retain_graph=True), 20 * a32.numel()


def main():
    torch.backends.cuda.matmul.allow_tf32 = True
    rows = []
    for name, fn, nbytes in cases():
        t = timed(fn)
        c = copy_time(nbytes)
        rows.append({"kernel": name, "bytes": nbytes, "us": round(t * 1e6, 2),
                     "copy_us": round(c * 1e6, 2), "tb_s": round(nbytes / t / 1e12, 3),
                     "share_of_copy": round(c / t, 3)})
        print(f"{name:40s} {nbytes / 1e6:9.1f} MB {t * 1e6:9.1f} us  copy {c * 1e6:8.1f} us "
              f"{c / t:6.3f}", flush=True)
    total_b = sum(r["bytes"] for r in rows)
    eff = total_b / sum(r["bytes"] / r["share_of_copy"] for r in rows)
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "rows": rows, "bytes_weighted_share": round(eff, 3)}))


if __name__ == "__main__":
    main()
