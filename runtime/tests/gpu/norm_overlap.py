"""norm_overlap.py: how much of the gradient norm's pass hides behind the backward products.

GPT 6.6B's shapes on one GPU (2048 tokens, 32 layers of 4096, bf16): each layer's four
backward products (input and weight gradients), with the sum of squares of that layer's
805 MB of fp32 gradients queued after it on a second stream ("overlap"), or of all 26 GB
after the last layer ("serial_end"), or on the same stream a layer at a time
("serial_each"). Measured 2026-11-29 on the lent H200 (docs/measurements.md): the overlap
hid 0.2 of the norm's 6.4 ms.

    python3 runtime/tests/gpu/norm_overlap.py
"""
import torch
torch.manual_seed(0)
dev = "cuda"
T, H, F, L = 2048, 4096, 16384, 32
bf = torch.bfloat16
x = torch.randn(T, H, device=dev, dtype=bf)
xf = torch.randn(T, F, device=dev, dtype=bf)
w = {n: torch.randn(*s, device=dev, dtype=bf) for n, s in
     {"qkv": (3 * H, H), "proj": (H, H), "fc1": (F, H), "fc2": (H, F)}.items()}
dy = {"qkv": torch.randn(T, 3 * H, device=dev, dtype=bf), "proj": torch.randn(T, H, device=dev, dtype=bf),
      "fc1": torch.randn(T, F, device=dev, dtype=bf), "fc2": torch.randn(T, H, device=dev, dtype=bf)}
inp = {"qkv": x, "proj": x, "fc1": x, "fc2": xf}
gw = {n: torch.zeros(*w[n].shape, device=dev, dtype=bf) for n in w}
per_layer = 12 * H * H + 13 * H  # parameters of one layer
grads = torch.randn(L, per_layer, device=dev, dtype=torch.float32)
out = torch.zeros(L, device=dev)

def layer_bwd():
    for n in ["fc2", "fc1", "proj", "qkv"]:
        torch.matmul(dy[n], w[n])                        # dgrad
        torch.matmul(dy[n].t(), inp[n], out=gw[n])       # wgrad (bf16 out here; planc adds into fp32)

side = torch.cuda.Stream()
def run(mode):
    main = torch.cuda.current_stream()
    for l in range(L):
        layer_bwd()
        if mode == "overlap":
            ev = torch.cuda.Event(); ev.record(main)
            with torch.cuda.stream(side):
                side.wait_event(ev)
                out[l] = torch.linalg.vector_norm(grads[l]) ** 2
        elif mode == "serial_each":
            out[l] = torch.linalg.vector_norm(grads[l]) ** 2
    if mode == "serial_end":
        torch.linalg.vector_norm(grads)
    if mode == "overlap":
        main.wait_stream(side)

def time(mode, reps=5):
    for _ in range(2): run(mode)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        a.record(); run(mode); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    return sorted(ts)[reps // 2]

for mode in ["none", "serial_end", "serial_each", "overlap", "none", "overlap", "serial_end"]:
    print(f"{mode:12s} {time(mode):8.2f} ms")
n = grads.numel() * 4
t0 = time("none"); t1 = time("serial_end"); t2 = time("overlap")
print(f"norm alone {t1 - t0:.2f} ms ({n / (t1 - t0) / 1e9:.2f} TB/s); overlapped costs {t2 - t0:.2f} ms")
