"""optimizer_overlap.py: how much of a step's optimizer update hides behind the next step's
forward when the two run on two streams (issue 26: GPT 6.6B at global batch 1 spends a
quarter of its step in AdamW, a pass bound by memory, while the forward's products are bound
by arithmetic).

For each model it builds the forward's products and attention (bf16, the speed plans'
shapes) and an AdamW over fp32 master weights, gradients and moments of the model's
parameters, one tensor a layer (torch._fused_adamw_, ~28 bytes a parameter), and times,
alternating, CUDA events, after warm-up:
  - serial:  the update of every layer, then the forward (what planc runs today);
  - overlap: the update on a second stream, layer by layer, each layer's forward waiting on
             its own layer's update (the embedding's first), the forward on the first stream.
Prints both and the share of the update the overlap hid.

Run: python3 optimizer_overlap.py
"""
import torch
import torch.nn.functional as F

from cuda_timing import seconds_per_call

MODELS = [
    # name, layers, hidden, heads, kv heads, head dim, ffn, gated, vocab, batch, seq
    ("gpt-6.6b 1x2048", 32, 4096, 32, 32, 128, 16384, False, 50304, 1, 2048),
    ("llama-3.2-1b 4x2048", 16, 2048, 32, 8, 64, 8192, True, 128256, 4, 2048),
]


def build(layers, h, heads, kv, d, ffn, gated, vocab, b, t, dev):
    bf = torch.bfloat16
    n = b * t
    x = torch.randn(n, h, device=dev, dtype=bf)
    qkv_w = (heads + 2 * kv) * d
    up_w = 2 * ffn if gated else ffn
    ws = []
    sizes = [vocab * h]
    for _ in range(layers):
        ws.append(
            (
                torch.randn(h, qkv_w, device=dev, dtype=bf) * 0.02,
                torch.randn(heads * d, h, device=dev, dtype=bf) * 0.02,
                torch.randn(h, up_w, device=dev, dtype=bf) * 0.02,
                torch.randn(ffn, h, device=dev, dtype=bf) * 0.02,
            )
        )
        sizes.append(h * qkv_w + heads * d * h + h * up_w + ffn * h)

    def layer(l, x):
        wq, wo, wu, wd = ws[l]
        qkv = x @ wq
        q = qkv[:, : heads * d].view(b, t, heads, d).transpose(1, 2)
        k = qkv[:, heads * d : (heads + kv) * d].view(b, t, kv, d).transpose(1, 2)
        v = qkv[:, (heads + kv) * d :].view(b, t, kv, d).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != heads)
        x = x + o.transpose(1, 2).reshape(n, heads * d) @ wo
        u = x @ wu
        if gated:
            g, u = u.chunk(2, dim=-1)
            u = F.silu(g) * u
        else:
            u = F.gelu(u, approximate="tanh")
        return x + u @ wd

    def opt_state(numel):
        f = torch.float32
        return [torch.zeros(numel, device=dev, dtype=f) + 0.01 for _ in range(4)] + [
            torch.ones((), device=dev, dtype=f)
        ]

    states = [opt_state(s) for s in sizes]
    head_w = torch.randn(h, vocab, device=dev, dtype=bf) * 0.02

    def update(i):
        p, g, m, v, step = states[i]
        torch._fused_adamw_(
            [p], [g], [m], [v], [], [step],
            lr=1e-4, beta1=0.9, beta2=0.95, weight_decay=0.1, eps=1e-8,
            amsgrad=False, maximize=False,
        )

    def forward(wait=None):
        if wait:
            wait(0)
        y = x
        for l in range(layers):
            if wait:
                wait(l + 1)
            y = layer(l, y)
        return y[:, :h] @ head_w

    return update, forward, len(sizes), sum(sizes)


def ms(fn, reps=10):
    """Milliseconds a call of `fn` takes over `reps` in a row."""
    return seconds_per_call(fn, reps) * 1e3


def main():
    dev = torch.device("cuda")
    torch.manual_seed(0)
    print(torch.__version__, torch.cuda.get_device_name())
    side = torch.cuda.Stream()
    main_s = torch.cuda.current_stream()
    for name, *shape in MODELS:
        update, forward, chunks, params = build(*shape, dev)
        events = [torch.cuda.Event() for _ in range(chunks)]

        def serial():
            for i in range(chunks):
                update(i)
            forward()

        def overlapped():
            side.wait_stream(main_s)
            with torch.cuda.stream(side):
                for i in range(chunks):
                    update(i)
                    events[i].record(side)
            forward(lambda i: main_s.wait_event(events[i]))
            main_s.wait_stream(side)

        def only_update():
            for i in range(chunks):
                update(i)

        for fn in (serial, overlapped, only_update, forward):
            fn()
        torch.cuda.synchronize()
        rows = {"serial": [], "overlap": [], "update": [], "forward": []}
        for _ in range(3):
            rows["update"].append(ms(only_update))
            rows["forward"].append(ms(forward))
            rows["serial"].append(ms(serial))
            rows["overlap"].append(ms(overlapped))
        med = {k: sorted(v)[len(v) // 2] for k, v in rows.items()}
        hid = (med["serial"] - med["overlap"]) / med["update"]
        gbps = params * 28 / med["update"] / 1e6
        print(
            f"{name}: {params / 1e9:.2f} B params; update {med['update']:.2f} ms "
            f"({gbps:.0f} GB/s), forward {med['forward']:.2f} ms, serial "
            f"{med['serial']:.2f} ms, overlapped {med['overlap']:.2f} ms: "
            f"{100 * hid:.0f} % of the update hidden"
        )
        for k, v in rows.items():
            print(f"  {k}: " + " ".join(f"{x:.2f}" for x in v))
        del update, forward
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
