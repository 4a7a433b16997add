#!/usr/bin/env python3
"""Independent numerics reference for `planc run` (docs/spec/run.md).

planc trains with its own kernels; this script replays the same training with PyTorch +
transformers, starting from planc's own step-0 checkpoint (so initialisation is out of the
picture), and compares the losses step by step. Nothing here imports planc code: the only
things shared are the contract's data layout and the Hugging Face checkpoint.

  reference.py make-data OUT --vocab V --tokens N --seed S
  reference.py compare --ckpt DIR/step-0000000 --metrics planc.jsonl --data tokens.bin \\
      --micro-batch B --global-batch G --seq S --steps N --precision fp32|bf16 \\
      [--lr --beta1 --beta2 --eps --weight-decay --clip] [--attn eager|sdpa] [--tol REL]
  reference.py same-losses FULL.jsonl PART.jsonl --first A --last B [--tol REL]

Exit status: 0 agreed, 1 disagreed, 2 misuse or a missing dependency/file.
make-data and same-losses need plain Python only; compare needs numpy, torch, transformers.
"""
import argparse
import functools
import json
import math
import os
import sys

print = functools.partial(print, flush=True)  # readable live under tee / a remote runner


def die(msg, code=2):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def need_numpy():
    try:
        import numpy as np
    except ImportError:
        die("numpy is not installed (pip install numpy)")
    return np


def token_dtype(vocab):
    # The contract's layout (nanoGPT's prepare.py): uint16 when the ids fit, else uint32.
    return "<u2" if vocab <= 65536 else "<u4"


# ---------------------------------------------------------------------------------------
# make-data


# Successor probabilities in percent: the chain's entropy rate is H(P) (about 1.13 nats), a
# floor the loss can approach, far below ln(V); a model that learns the table shows it fast.
P = (55, 25, 12, 8)


def splitmix64(seed):
    """A fully specified generator, so a seed names the same file on any machine and
    version (numpy's streams are not promised to stay fixed); pure Python, no numpy."""
    m = (1 << 64) - 1
    x = seed & m
    while True:
        x = (x + 0x9E3779B97F4A7C15) & m
        z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        yield z ^ (z >> 31)


def cmd_make_data(a):
    import array
    if a.vocab < 2 or a.tokens < 2:
        die("--vocab and --tokens must be at least 2")
    rnd = splitmix64(a.seed)
    # Token t is followed by succ[t][i] with probability P[i] %.
    succ = [[next(rnd) % a.vocab for _ in P] for _ in range(a.vocab)]
    pick = []
    for i, p in enumerate(P):
        pick += [i] * p
    x = [next(rnd) % a.vocab]
    for _ in range(a.tokens - 1):
        x.append(succ[x[-1]][pick[next(rnd) % 100]])
    code = "H" if a.vocab <= 65536 else ("I" if array.array("I").itemsize == 4 else "L")
    arr = array.array(code, x)
    if sys.byteorder == "big":
        arr.byteswap()  # the contract's files are little-endian
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "wb") as f:
        arr.tofile(f)
    h = -sum(p / 100 * math.log(p / 100) for p in P)
    print(f"wrote {a.out}: {a.tokens} tokens, {'uint16' if code == 'H' else 'uint32'} little-endian, "
          f"vocab {a.vocab}, seed {a.seed}; Markov chain with {len(P)} successors a token, "
          f"entropy rate {h:.3f} nats (uniform: {math.log(a.vocab):.3f})")
    return 0


# ---------------------------------------------------------------------------------------
# metrics


def read_metrics(path):
    """{step: record} from planc's JSONL; a repeated step keeps its last line (appended runs)."""
    if not os.path.isfile(path):
        die(f"no metrics file {path}")
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                die(f"{path}:{n}: not JSON: {e}")
            if "step" not in r or "loss" not in r:
                die(f"{path}:{n}: a metrics line needs `step` and `loss`")
            if r["step"] in out:
                print(f"warning: {path}: step {r['step']} appears twice; keeping the last")
            out[int(r["step"])] = r
    return out


def rel(a, b):
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(b), 1e-12)


def cmd_same_losses(a):
    """The resume check: a resumed run's losses against the uninterrupted run's."""
    full, part = read_metrics(a.full), read_metrics(a.part)
    worst, worst_abs, bad = 0.0, 0.0, []
    print(f"{'step':>5} {'uninterrupted':>16} {'resumed':>16} {'rel diff':>10}")
    for s in range(a.first, a.last + 1):
        x, y = full.get(s, {}).get("loss"), part.get(s, {}).get("loss")
        r = rel(y, x)
        if x is None or y is None:
            bad.append(s)
        else:
            worst_abs = max(worst_abs, abs(x - y))
        worst = max(worst, r)
        fmt = lambda v: f"{v:16.9f}" if v is not None else f"{'missing':>16}"
        print(f"{s:5d} {fmt(x)} {fmt(y)} {r:10.2e}")
    ok = not bad and worst <= a.tol
    if bad:
        print(f"missing steps: {bad}")
    print(f"max relative loss difference {worst:.3e} (absolute {worst_abs:.3e}), tolerance {a.tol:g}: "
          f"{'OK' if ok else 'FAIL'}")
    print(json.dumps({"max_rel_loss_diff": worst, "max_abs_loss_diff": worst_abs,
                      "steps": a.last - a.first + 1, "ok": ok}))
    return 0 if ok else 1


# ---------------------------------------------------------------------------------------
# compare


def need_torch():
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        die("PyTorch is not installed: compare needs torch with CUDA (pip install torch)")
    try:
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError:
        die("transformers is not installed: compare needs it (pip install transformers safetensors)")
    if not torch.cuda.is_available():
        die("torch sees no CUDA device; compare runs on the GPU")
    return torch, F, transformers, AutoModelForCausalLM


def exact_fp32(torch):
    """The contract's fp32 is full fp32: no TF32 anywhere, no reduced-precision bf16 sums."""
    if hasattr(torch.backends, "fp32_precision"):
        # PyTorch ≥ 2.9: the new switches; mixing them with the legacy flags is an error there.
        torch.backends.fp32_precision = "ieee"
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.cudnn.fp32_precision = "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    # planc accumulates bf16 products in fp32; cuBLAS may otherwise reduce split-K in bf16.
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False


def load_model(torch, transformers, AutoModelForCausalLM, ckpt, attn):
    for f in ("config.json", "model.safetensors"):
        if not os.path.isfile(os.path.join(ckpt, f)):
            die(f"{ckpt} has no {f}: pass the step-0000000 folder of a `planc run --save` directory")
    ver = tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())
    # `dtype` replaced `torch_dtype` in 4.56; v5 loads in the config's dtype unless told.
    kw = {"dtype" if ver >= (4, 56) else "torch_dtype": torch.float32}
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            ckpt, attn_implementation=attn, output_loading_info=True, **kw)
    except Exception as e:  # a layout or name mismatch in planc's checkpoint lands here
        die(f"transformers cannot load {ckpt}: {type(e).__name__}: {e}", 1)
    cfg = model.config
    missing = [k for k in info.get("missing_keys", [])
               if not (k == "lm_head.weight" and getattr(cfg, "tie_word_embeddings", False))]
    if missing:
        # A missing tensor is silently random-initialised by transformers: the comparison
        # would then measure nothing.
        die(f"checkpoint lacks tensors transformers expects: {sorted(missing)}", 1)
    if info.get("unexpected_keys"):
        print(f"warning: checkpoint tensors transformers ignores: {sorted(info['unexpected_keys'])}")
    if info.get("mismatched_keys"):
        die(f"tensors with the wrong shapes: {info['mismatched_keys']}", 1)
    drop = {k: getattr(cfg, k) for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout")
            if getattr(cfg, k, 0) not in (0, 0.0, None)}
    if drop:
        print(f"note: config.json sets dropout {drop}; running in eval mode, so it is off")
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_theta", None)
    if rope is not None:
        # transformers 5 moved rope_theta into rope_parameters; show what it really uses.
        print(f"rope as loaded: {rope}")
    model = model.float().cuda().eval()  # eval: no dropout; gradients still flow
    return model


def cmd_compare(a):
    np = need_numpy()
    torch, F, transformers, AutoModelForCausalLM = need_torch()
    exact_fp32(torch)
    G, B, S, N = a.global_batch, a.micro_batch, a.seq, a.steps
    if G % B:
        die(f"--global-batch {G} is not a multiple of --micro-batch {B}")
    tol = a.tol if a.tol is not None else (1e-4 if a.precision == "fp32" else 2e-2)
    planc = read_metrics(a.metrics)

    model = load_model(torch, transformers, AutoModelForCausalLM, a.ckpt, a.attn)
    V = model.config.vocab_size
    if not os.path.isfile(a.data):
        die(f"no token file {a.data}")
    tokens = np.fromfile(a.data, dtype=token_dtype(V)).astype(np.int64)
    if tokens.size < 2:
        die(f"{a.data} holds fewer than 2 tokens")
    if tokens.max() >= V:
        die(f"{a.data} has token {tokens.max()} ≥ the model's vocabulary {V}")
    n = tokens.size
    print(f"reference: {type(model).__name__} from {a.ckpt}, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, "
          f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}, {a.precision}, attn {a.attn}")
    print(f"data: {n} tokens; {N} steps of {G} samples × {S} tokens in micro-batches of {B}"
          f"{' (wraps at the end of the file)' if (N * G * S + 1) > n else ''}")

    # model.parameters() already yields a tied lm_head/wte once; dedupe anyway by identity.
    params = list({id(p): p for p in model.parameters() if p.requires_grad}.values())
    decay = [p for p in params if p.dim() >= 2]
    plain = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.weight_decay}, {"params": plain, "weight_decay": 0.0}],
        lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, foreach=False)

    offs = np.arange(S + 1, dtype=np.int64)

    def micro_batch(step, j):
        # Sample k is tokens[k·S .. k·S+S+1] with token-wise wrap-around (run.md, Data).
        ks = step * G + j * B + np.arange(B, dtype=np.int64)
        ids = tokens[(ks[:, None] * S + offs[None, :]) % n]
        t = torch.from_numpy(ids).cuda()
        return t[:, :S], t[:, 1:]

    bf16 = a.precision == "bf16"
    denom = G * S
    losses, norms = [], []
    for step in range(N):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for j in range(G // B):
            x, y = micro_batch(step, j)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                # No labels: transformers would shift them again; the targets are already shifted.
                logits = model(input_ids=x, use_cache=False).logits
            s = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1), reduction="sum")
            (s / denom).backward()
            total += s.item()
        losses.append(total / denom)
        gn = torch.nn.utils.clip_grad_norm_(params, a.clip if a.clip > 0 else math.inf)
        norms.append(float(gn))
        opt.step()

    if a.save_metrics:
        with open(a.save_metrics, "w") as f:
            for i in range(N):
                f.write(json.dumps({"step": i + 1, "loss": losses[i], "grad_norm": norms[i]}) + "\n")

    print(f"{'step':>5} {'planc loss':>12} {'torch loss':>12} {'rel diff':>10} "
          f"{'planc gnorm':>12} {'torch gnorm':>12} {'rel diff':>10}")
    worst, worst_g, missing = 0.0, 0.0, []
    for i in range(N):
        r = planc.get(i + 1)
        pl = r.get("loss") if r else None
        pg = r.get("grad_norm") if r else None
        if r is None:
            missing.append(i + 1)
        d, dg = rel(pl, losses[i]), rel(pg, norms[i])
        worst, worst_g = max(worst, d), max(worst_g, dg)
        f = lambda v: f"{v:12.6f}" if isinstance(v, (int, float)) else f"{'-':>12}"
        print(f"{i + 1:5d} {f(pl)} {losses[i]:12.6f} {d:10.2e} {f(pg)} {norms[i]:12.6f} {dg:10.2e}")
    if missing:
        print(f"planc's metrics lack steps {missing}")
    ok = not missing and worst <= tol
    print(f"max relative loss difference {worst:.3e} (tolerance {tol:g}); "
          f"max relative grad-norm difference {worst_g:.3e}: {'OK' if ok else 'FAIL'}")
    print(json.dumps({"max_rel_loss_diff": worst, "max_rel_grad_norm_diff": worst_g, "steps": N,
                      "tol": tol, "precision": a.precision, "ok": ok,
                      "first_loss": losses[0], "last_loss": losses[-1]}))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    m = sub.add_parser("make-data", help="write a learnable token file (seeded Markov chain)")
    m.add_argument("out")
    m.add_argument("--vocab", type=int, required=True)
    m.add_argument("--tokens", type=int, required=True)
    m.add_argument("--seed", type=int, default=1)

    c = sub.add_parser("compare", help="replay planc's training in torch; compare the losses")
    c.add_argument("--ckpt", required=True, help="planc's DIR/step-0000000")
    c.add_argument("--metrics", required=True, help="planc's --metrics JSONL")
    c.add_argument("--data", required=True, help="the plan's token file")
    c.add_argument("--micro-batch", type=int, required=True)
    c.add_argument("--global-batch", type=int, required=True)
    c.add_argument("--seq", type=int, required=True)
    c.add_argument("--steps", type=int, required=True)
    c.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    # Defaults are the contract's defaults (run.md, Training attributes).
    c.add_argument("--lr", type=float, default=3e-4)
    c.add_argument("--beta1", type=float, default=0.9)
    c.add_argument("--beta2", type=float, default=0.95)
    c.add_argument("--eps", type=float, default=1e-8)
    c.add_argument("--weight-decay", type=float, default=0.1)
    c.add_argument("--clip", type=float, default=1.0)
    c.add_argument("--attn", choices=["eager", "sdpa"], default="eager")
    c.add_argument("--tol", type=float, default=None, help="default 1e-4 (fp32), 2e-2 (bf16)")
    c.add_argument("--save-metrics", metavar="FILE",
                   help="also write torch's losses as metrics JSONL (planc's format), to compare "
                        "two reference runs (eager vs sdpa, fp32 vs bf16) with each other")

    r = sub.add_parser("same-losses", help="resume check: two metrics files agree on a step range")
    r.add_argument("full", help="metrics of the uninterrupted run")
    r.add_argument("part", help="metrics of the resumed (or partial) run")
    r.add_argument("--first", type=int, required=True)
    r.add_argument("--last", type=int, required=True)
    r.add_argument("--tol", type=float, default=1e-6)

    a = ap.parse_args()
    return {"make-data": cmd_make_data, "compare": cmd_compare, "same-losses": cmd_same_losses}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
