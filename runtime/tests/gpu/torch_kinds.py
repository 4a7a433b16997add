"""Where the step of a train.py that planc emitted spends its GPU time, by planc's kinds.

`planc check` splits a `framework = torch` plan's step into kinds (linear layers, attention,
norms, activation, output layer, optimizer, ...). This script runs the emitted script's own
`main` on one GPU with CUDA events around every module, the loss, the clip and the optimizer,
and prints the same split, so a gap between the prediction and the run can be put on the
kind it lives in. The events sit on the compute stream: an interval includes whatever that
stream waited for (FSDP2's copies on their own streams, the host falling behind), which is
what a step pays.

Forward: pre/post hooks on the products, norms, attention and MLP modules, the embedding and
the root; a parent's time less its children's is the parent's own (attention's core = the
attention module less its four products). Backward: full backward pre/post hooks on the
products and norms; the attention's core is the time from its output product's backward to
the first of its input products' (o_proj to q/k/v, GPT-2's c_proj to c_attn), the MLP's
activation likewise (the root, which carries FSDP's hooks, and the attention module, which
takes its input by keyword, get none). What no interval covers is printed as `unattributed`
(residual adds, FSDP's gathers and copies between layers, the host's gaps). Steps end at
`torch.optim.AdamW.zero_grad`: the DDP and FSDP2 scripts, not DeepSpeed's engine
(torch_profile.py profiles that one).

    python torch_kinds.py EMITTED/train.py --steps 8 [train.py flags...]

The JSON is the last thing on standard output (train.py logs before it). The hooks cost the
host time of their own: where the step is bound by the host's dispatch, the intervals are
longer than in the plain run (torch_profile.py times the plain run's kernels).
"""

import collections
import importlib.util
import json
import sys
import time

import torch


def load(path):
    spec = importlib.util.spec_from_file_location("planc_train", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Wall:
    def __init__(self):
        self.t = time.perf_counter()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


class Marks:
    """CUDA event pairs by label, kept per step so the first steps can be dropped."""

    def __init__(self):
        self.steps = [collections.defaultdict(list)]
        self.open = collections.defaultdict(list)

    def event(self):
        if not torch.cuda.is_available():  # a smoke test on the CPU: wall clock
            return Wall()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def begin(self, key):
        self.open[key].append(self.event())

    def end(self, label, key):
        if self.open[key]:
            self.steps[-1][label].append((self.open[key].pop(), self.event()))

    def next_step(self):
        self.steps.append(collections.defaultdict(list))

    def totals(self, skip):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        kept = [s for s in self.steps[skip:] if s]
        out = collections.defaultdict(float)
        for s in kept:
            for label, pairs in s.items():
                out[label] += sum(a.elapsed_time(b) for a, b in pairs) / len(kept)
        return dict(out), len(kept)


def kind_of(name, module):
    cls = type(module).__name__
    if name == "":
        return "all"
    if name.endswith("lm_head"):
        return "head"
    if isinstance(module, torch.nn.Linear) or cls == "Conv1D":  # GPT-2's products are Conv1D
        return "linear (mlp)" if ".mlp." in name else "linear (attention)"
    if isinstance(module, torch.nn.Embedding):
        return "embedding"
    if "RMSNorm" in cls or "LayerNorm" in cls:
        return "norm"
    if cls.endswith("Attention"):
        return "attention module"
    if cls.endswith("MLP"):
        return "mlp module"
    return None


def instrument(model, marks):
    for name, module in model.named_modules():
        kind = kind_of(name, module)
        if kind is None:
            continue

        def pre(m, *a, key=name):
            marks.begin(("f", key))

        def post(m, *a, kind=kind, key=name):
            marks.end(f"fwd {kind}", ("f", key))
            if kind == "head":
                marks.begin(("f", "loss"))

        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)
        # The root and the embedding carry FSDP's hooks or take no gradient, and the
        # attention module takes its input by keyword, which a full backward hook does not
        # see: their backward is read between their products' hooks instead.
        if kind in ("all", "embedding", "attention module", "mlp module"):
            continue
        # Backward runs o_proj (down_proj), then the attention's core (the activation), then
        # q/k/v (gate/up): the core is the time between those products' hooks.
        parent = name.rsplit(".", 1)[0]
        leaf = name.rsplit(".", 1)[-1]
        # GPT-2: attn.c_proj, the core, attn.c_attn; mlp.c_proj, the GELU, mlp.c_fc.
        mlp = ".mlp." in name
        core = {"o_proj": "attention core", "down_proj": "activation",
                "c_proj": "activation" if mlp else "attention core"}.get(leaf)
        after = {"q_proj": "attention core", "k_proj": "attention core",
                 "v_proj": "attention core", "gate_proj": "activation",
                 "up_proj": "activation", "c_attn": "attention core",
                 "c_fc": "activation"}.get(leaf)

        def bpre(m, go, kind=kind, key=name, after=after, parent=parent):
            if kind == "head":
                marks.end("bwd loss", ("b", "loss"))
            if after:
                marks.end(f"bwd {after}", ("b", parent, after))
            marks.begin(("b", key))

        def bpost(m, gi, go, kind=kind, key=name, core=core, parent=parent):
            marks.end(f"bwd {kind}", ("b", key))
            if core:
                marks.begin(("b", parent, core))

        module.register_full_backward_pre_hook(bpre)
        module.register_full_backward_hook(bpost)


def derive(ms):
    """planc's kinds from the intervals: parents less their children, and what none covers."""
    g = ms.get
    out = {}
    for d in ("fwd", "bwd"):
        out[f"{d} linear"] = g(f"{d} linear (attention)", 0) + g(f"{d} linear (mlp)", 0)
    out["fwd attention core"] = g("fwd attention module", 0) - g("fwd linear (attention)", 0)
    out["fwd activation"] = g("fwd mlp module", 0) - g("fwd linear (mlp)", 0)
    out["bwd attention core"] = g("bwd attention core", 0)
    out["bwd activation"] = g("bwd activation", 0)
    for d in ("fwd", "bwd"):
        out[f"{d} norms"] = g(f"{d} norm", 0)
        out[f"{d} head"] = g(f"{d} head", 0)
    out["fwd embedding"] = g("fwd embedding", 0)
    out["fwd loss"] = g("fwd loss", 0)
    out["bwd loss"] = g("bwd loss", 0)
    covered_f = sum(g(f"fwd {k}", 0) for k in ("embedding", "norm", "attention module",
                                                "mlp module", "head"))
    covered_b = sum(g(f"bwd {k}", 0) for k in ("norm", "linear (attention)", "linear (mlp)",
                                                "attention core", "activation", "head", "loss"))
    out["fwd unattributed"] = g("fwd all", 0) - covered_f
    out["bwd unattributed"] = g("bwd all", 0) - covered_b
    out["optimizer clip"] = g("optimizer clip", 0)
    out["optimizer step"] = g("optimizer step", 0)
    out["step"] = g("step", 0)
    out["step unattributed"] = g("step", 0) - g("fwd all", 0) - g("fwd loss", 0) - g(
        "bwd all", 0) - g("optimizer clip", 0) - g("optimizer step", 0)
    kinds = {
        "linear layers": out["fwd linear"] + out["bwd linear"],
        "attention": out["fwd attention core"] + out["bwd attention core"],
        "norms": out["fwd norms"] + out["bwd norms"],
        "activation": out["fwd activation"] + out["bwd activation"],
        "output layer (head + loss)": out["fwd head"] + out["bwd head"] + out["fwd loss"]
        + out["bwd loss"],
        "optimizer (clip + step)": out["optimizer clip"] + out["optimizer step"],
        "embedding (forward)": out["fwd embedding"],
        "unattributed (fwd, bwd, between)": out["fwd unattributed"] + out["bwd unattributed"]
        + out["step unattributed"],
    }
    return {k: round(v, 3) for k, v in out.items()}, {k: round(v, 3) for k, v in kinds.items()}


def main():
    path, argv = sys.argv[1], sys.argv[2:]
    train = load(path)
    marks = Marks()
    build = train.build_model

    def build_model(args, device):
        model = build(args, device)
        instrument(model, marks)
        return model

    train.build_model = build_model

    f = torch.nn.functional
    ce = f.cross_entropy

    def cross_entropy(*a, **k):
        out = ce(*a, **k)
        marks.end("fwd loss", ("f", "loss"))
        return out

    f.cross_entropy = cross_entropy

    backward = torch.Tensor.backward

    def tensor_backward(self, *a, **k):
        marks.begin(("b", "all"))
        marks.begin(("b", "loss"))
        out = backward(self, *a, **k)
        marks.end("bwd all", ("b", "all"))
        return out

    torch.Tensor.backward = tensor_backward

    clip = torch.nn.utils.clip_grad_norm_

    def clip_grad_norm_(*a, **k):
        marks.begin(("o", "clip"))
        out = clip(*a, **k)
        marks.end("optimizer clip", ("o", "clip"))
        return out

    torch.nn.utils.clip_grad_norm_ = clip_grad_norm_

    step = torch.optim.AdamW.step

    def adam_step(self, *a, **k):
        marks.begin(("o", "step"))
        out = step(self, *a, **k)
        marks.end("optimizer step", ("o", "step"))
        return out

    torch.optim.AdamW.step = adam_step
    zero_grad = torch.optim.AdamW.zero_grad

    def adam_zero_grad(self, *a, **k):
        out = zero_grad(self, *a, **k)
        marks.end("step", ("s", "step"))
        marks.next_step()
        marks.begin(("s", "step"))
        return out

    torch.optim.AdamW.zero_grad = adam_zero_grad
    marks.begin(("s", "step"))

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    rc = train.main(argv)
    ms, kept = marks.totals(skip=3)
    parts, kinds = derive(ms)
    print(json.dumps({
        "script": path, "args": argv, "rc": rc, "steps_kept": kept,
        "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3)
        if torch.cuda.is_available() else None,
        "kinds_ms": kinds, "parts_ms": parts,
        "intervals_ms": {k: round(v, 3) for k, v in sorted(ms.items())},
    }, indent=1))


if __name__ == "__main__":
    main()
