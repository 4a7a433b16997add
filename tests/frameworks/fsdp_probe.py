"""FSDP2 on one GPU: what `fully_shard` costs over the same model unwrapped.

With one rank the all-gathers and reduce-scatters move no bytes between GPUs, so the
difference between the two step times is FSDP2's own work per layer: the hooks and stream
waits issued from the CPU, the copy of each layer's parameters into the gathered buffer
(copy-in/copy-out) and the gradients' reduce-scatter copy, plus the memory of a gathered
layer. planc prices these per layer (issue 24); this probe measures them.

    torchrun --nproc-per-node 1 fsdp_probe.py --layers 16 --hidden 2048 --batch 4 --seq 2048

Prints one JSON line per mode: step_ms (median after warm-up), peak_gib, and the per-layer
difference against the plain model.
"""
import argparse, json, math, os, time
import torch, torch.nn as nn, torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, default=12)
p.add_argument("--hidden", type=int, default=768)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--vocab", type=int, default=50304)
p.add_argument("--batch", type=int, default=16)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--modes", default="plain,fsdp,fsdp_noreshard")
a = p.parse_args()

if "RANK" not in os.environ:
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="localhost", MASTER_PORT="29517")
torch.distributed.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy


class Block(nn.Module):
    def __init__(s):
        super().__init__(); h = a.hidden
        s.ln1 = nn.LayerNorm(h); s.qkv = nn.Linear(h, 3 * h); s.proj = nn.Linear(h, h)
        s.ln2 = nn.LayerNorm(h); s.up = nn.Linear(h, 4 * h); s.down = nn.Linear(4 * h, h)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, 2)
        q, k, v = [t.view(B, T, a.heads, C // a.heads).transpose(1, 2) for t in (q, k, v)]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + s.down(F.gelu(s.up(s.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte = nn.Embedding(a.vocab, a.hidden); s.wpe = nn.Embedding(a.seq, a.hidden)
        s.blocks = nn.ModuleList(Block() for _ in range(a.layers)); s.lnf = nn.LayerNorm(a.hidden)

    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in s.blocks:
            x = b(x)
        logits = s.lnf(x) @ s.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, a.vocab), tgt.reshape(-1))


def run(mode):
    torch.manual_seed(0)
    m = GPT().cuda()
    if mode.startswith("fsdp"):
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for b in m.blocks:
            fully_shard(b, mp_policy=mp, reshard_after_forward=(mode == "fsdp"))
        fully_shard(m, mp_policy=mp)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True)
    x = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device="cuda")
    times = []
    torch.cuda.reset_peak_memory_stats()
    for _ in range(a.steps):
        torch.cuda.synchronize(); t0 = time.perf_counter()
        if mode == "plain":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(x[:, :-1], x[:, 1:])
        else:
            loss = m(x[:, :-1], x[:, 1:])
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
    t = sorted(times[5:])[len(times[5:]) // 2]
    peak = torch.cuda.max_memory_allocated() / 2**30
    del m, opt
    torch.cuda.empty_cache()
    return t, peak, loss.item()


res = {}
for mode in a.modes.split(","):
    t, peak, loss = run(mode)
    res[mode] = t
    row = dict(probe="fsdp2", mode=mode, layers=a.layers, hidden=a.hidden, batch=a.batch, seq=a.seq,
               step_ms=round(t * 1e3, 2), peak_gib=round(peak, 2), loss=round(loss, 3))
    if mode != "plain" and "plain" in res:
        row["per_layer_ms"] = round((t - res["plain"]) * 1e3 / a.layers, 3)
    print(json.dumps(row), flush=True)
torch.distributed.destroy_process_group()
