#!/usr/bin/env python3
"""autograd.py: planc's training kernels against PyTorch autograd.

    python3 autograd.py CASE FILE

FILE is a safetensors file runtime/tests/autograd.rs wrote: the inputs it gave a kernel
pair (forward and backward) and what the kernels returned. This script recomputes the
forward with torch in float64 and the backward with torch.autograd, and compares every
output. Exit 0 when all agree within the tolerance, 1 otherwise (the worst error is
printed either way). An independent reference: nothing here is planc's code.
"""
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

# fp32 kernels against float64: max |Δ| / max |reference| (a case may carry its own
# `tol`: the bf16 tensor-core attention)
TOL = 2e-5


def d64(t):
    return t.to(torch.float64)


def grad_of(f, inputs, dout):
    xs = [d64(x).requires_grad_(True) for x in inputs]
    y = f(*xs)
    y.backward(d64(dout))
    return y.detach(), [x.grad for x in xs]


def layernorm(t):
    c = t["x"].shape[-1]
    y, (dx, dw, db) = grad_of(
        lambda x, w, b: F.layer_norm(x, (c,), w, b, eps=float(t["eps"][0])),
        [t["x"], t["w"], t["b"]],
        t["dy"],
    )
    return {"y": y, "dx": dx + d64(t["dinp0"]), "dw": dw, "db": db}


def rmsnorm(t):
    eps = float(t["eps"][0])

    def f(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    y, (dx, dw) = grad_of(f, [t["x"], t["w"]], t["dy"])
    return {"y": y, "dx": dx + d64(t["dinp0"]), "dw": dw}


def gelu(t):
    y, (dh,) = grad_of(lambda h: F.gelu(h, approximate="tanh"), [t["h"]], t["dout"])
    return {"act": y, "dh": dh}


def gelu_bias(t):
    # The bias is not a leaf here: training adds its gradient from dh (the bias gradient).
    y, (dh,) = grad_of(lambda h: F.gelu(h + d64(t["b"]), approximate="tanh"), [t["h"]], t["dout"])
    return {"act": y, "dh": dh}


def gelu_products(t):
    # The up product with its bias, GELU, and GELU's gradient of the down product's input
    # gradient.
    x, w1, b1, w2, dy = (d64(t[k]) for k in ("x", "w1", "b1", "w2", "dy"))
    h = x @ w1.T + b1
    act, (dh,) = grad_of(lambda h: F.gelu(h, approximate="tanh"), [h], dy @ w2)
    return {"act": act, "h": h, "dh": dh}


def swiglu(t):
    f = t["h"].shape[-1] // 2
    y, (dh,) = grad_of(lambda h: F.silu(h[:, :f]) * h[:, f:], [t["h"]], t["dout"])
    return {"act": y, "dh": dh}


def softmax(t):
    # Scores [rows = B·H·T, T], row r is query t = r mod T; causal.
    s = t["scores"]
    T = s.shape[-1]
    scale = float(t["scale"][0])
    q = torch.arange(s.shape[0]) % T
    mask = torch.arange(T)[None, :] > q[:, None]

    def f(x):
        return torch.softmax((x * scale).masked_fill(mask, float("-inf")), -1)

    p, (ds,) = grad_of(f, [s], t["dp"])
    return {"p": p, "dscores": ds}


def cross_entropy(t):
    dscale = float(t["dscale"][0])
    tgt = t["targets"].long()

    def f(x):
        return F.cross_entropy(x, tgt, reduction="none")

    x = d64(t["logits"]).requires_grad_(True)
    loss = f(x)
    (loss.sum() * dscale).backward()
    return {"loss": loss.detach(), "dlogits": x.grad}


def rope(t):
    # qkv [B, T, (H + 2G)·D] → q, k, v [B, H, T, D] with rotary positions on q and k and
    # each key/value head serving H/G query heads (grouped-query attention); backward is
    # the gradient of that map.
    B, T, W = t["qkv"].shape
    H, G, D = (int(v) for v in t["hgd"])
    cos, sin = d64(t["cos"]), d64(t["sin"])  # [T, D/2]
    cos = torch.cat([cos, cos], -1)[None, None]
    sin = torch.cat([sin, sin], -1)[None, None]

    def rot(x):
        x1, x2 = x[..., : D // 2], x[..., D // 2 :]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def f(qkv):
        heads = qkv.view(B, T, H + 2 * G, D).transpose(1, 2)  # [B, H+2G, T, D]
        q, k, v = heads[:, :H], heads[:, H : H + G], heads[:, H + G :]
        rep = H // G
        k = k.repeat_interleave(rep, 1)
        v = v.repeat_interleave(rep, 1)
        return torch.cat([rot(q), rot(k), v], 1)

    dout = torch.cat([t["dq"], t["dk"], t["dv"]], 1)
    y, (dqkv,) = grad_of(f, [t["qkv"]], dout)
    return {"q": y[:, :H], "k": y[:, H : 2 * H], "v": y[:, 2 * H :], "dqkv": dqkv}


def flash(t):
    # q, k, v [B, H, T, D]; output and its gradient [B, T, H·D]; causal.
    B, H, T, D = t["q"].shape

    def f(q, k, v):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return o.transpose(1, 2).reshape(B, T, H * D)

    o, (dq, dk, dv) = grad_of(f, [t["q"], t["k"], t["v"]], t["dout"])
    return {"o": o, "dq": dq, "dk": dk, "dv": dv}


def sdpa(t):
    # cuDNN's attention as planc plans it (runtime/tests/attention_cudnn.rs): q [B, H, T, D],
    # k and v [B, G, T, D] (G key/value heads, each serving H/G query heads), output and its
    # gradient [B, T, H·D]; causal. Also each row's logsumexp of the scaled, masked scores
    # [B, H, T] (what forward leaves for backward), and dk, dv per key/value head.
    B, H, T, D = t["q"].shape
    G = t["k"].shape[1]

    def expand(x):
        return x.repeat_interleave(H // G, dim=1)

    def f(q, k, v):
        o = F.scaled_dot_product_attention(q, expand(k), expand(v), is_causal=True)
        return o.transpose(1, 2).reshape(B, T, H * D)

    o, (dq, dk, dv) = grad_of(f, [t["q"], t["k"], t["v"]], t["dout"])
    s = d64(t["q"]) @ expand(d64(t["k"])).transpose(-1, -2) / D**0.5
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    lse = torch.logsumexp(s.masked_fill(~causal, float("-inf")), dim=-1)
    return {"o": o, "lse": lse, "dq": dq, "dk": dk, "dv": dv}


def adamw(t):
    # One update over a range whose first `split` elements take weight decay and the rest
    # none (a weight and a bias): two parameter groups.
    lr, b1, b2, eps, wd, step, split = (float(v) for v in t["hyper"])
    split = int(split)
    w, g, m, v = (d64(t[k]) for k in ("w", "g", "m", "v"))
    parts = [slice(0, split), slice(split, w.shape[0])]
    params = [torch.nn.Parameter(w[s].clone()) for s in parts]
    opt = torch.optim.AdamW(
        [{"params": [params[0]], "weight_decay": wd}, {"params": [params[1]], "weight_decay": 0.0}],
        lr=lr,
        betas=(b1, b2),
        eps=eps,
    )
    for p, s in zip(params, parts):
        p.grad = g[s].clone()
        opt.state[p] = {
            "step": torch.tensor(step - 1, dtype=torch.float64),
            "exp_avg": m[s].clone(),
            "exp_avg_sq": v[s].clone(),
        }
    opt.step()
    cat = lambda f: torch.cat([f(p) for p in params])
    return {
        "w_new": cat(lambda p: p.detach()),
        "m_new": cat(lambda p: opt.state[p]["exp_avg"]),
        "v_new": cat(lambda p: opt.state[p]["exp_avg_sq"]),
    }


CASES = {
    "layernorm": layernorm,
    "rmsnorm": rmsnorm,
    "gelu": gelu,
    "gelu_bias": gelu_bias,
    "gelu_products": gelu_products,
    "swiglu": swiglu,
    "softmax": softmax,
    "cross_entropy": cross_entropy,
    "rope": rope,
    "flash": flash,
    "sdpa": sdpa,
    "adamw": adamw,
}


def main():
    case, path = sys.argv[1], sys.argv[2]
    t = load_file(path)
    want = CASES[case](t)
    tol = float(t["tol"][0]) if "tol" in t else TOL
    worst, ok = 0.0, True
    for name, ref in want.items():
        got = d64(t["out." + name]).reshape(ref.shape)
        scale = ref.abs().max().clamp_min(1e-30)
        err = float(((got - ref).abs().max() / scale))
        good = err <= tol
        ok &= good
        worst = max(worst, err)
        print(f"{case:>14} {name:<8} max rel error {err:.2e} {'ok' if good else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
