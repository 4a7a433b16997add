#!/usr/bin/env bash
# two_gpu.sh: the two-GPU speed and fidelity benchmark of `planc run` in one call on a lent
# 2-GPU machine, from the bundle `bundle.sh` builds (the `device` tool's run, carrying .dev):
#
#   runtime/tests/gpu/two_gpu.sh $OUT
#
# PARTS picks the parts (default: all of "calibrate speed torch"):
# - calibrate: `planc calibrate --gpus 2` (products, kernels and the 2-GPU collectives by
#   message size) into OUTDIR/profile.toml; the speed runs are priced from it (PROFILE=
#   names another; without either, the catalog's constants);
# - speed: GPT-2 124M over dp 2, Llama 3.2 1B over tp 2 (sequence parallel) and the same 1B
#   over pp 2 (1f1b, 4 micro-batches): each run's measured step beside the prediction for
#   the same plan and the step by kind; the real trace (`--trace`) and `planc simulate`'s
#   trace of the plan are written side by side into OUTDIR;
# - torch: torch_gpt_baseline.py (runtime/tests/gpu/) under torchrun, 2 processes (DDP), the GPT-2 shape, eager
#   with SDPA flash attention: tokens/s per GPU beside planc's dp 2 run.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
parts=" ${PARTS:-calibrate speed torch} "
want() { [[ "$parts" == *" $1 "* ]]; }
. "$here/env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
case "$gpu" in
    *H200*) cat=H200_SXM_141GB ;;
    *H100*) cat=H100_SXM_80GB ;;
    *) cat= ;;
esac
profile=
if want calibrate; then
    echo "== planc calibrate --gpus 2"
    "$planc" calibrate --gpus 2 -o "$out/profile.toml" 2>&1 | tr "\r" "\n" | tail -n 60
    [ -s "$out/profile.toml" ] && profile=$out/profile.toml
fi
profile=${PROFILE:-$profile}
if want speed; then
    plans=$out/plans
    mkdir -p "$plans"
    cp "$root/examples/gpt2-124m-2gpu-dp2.tp" "$plans/gpt2-dp2.tp"
    cp "$root/examples/llama3.2-1b-2gpu-tp2.tp" "$plans/llama1b-tp2.tp"
    sed -e 's/tp = 2/tp = 1/' -e 's/sequence_parallel = true/sequence_parallel = false/' \
        -e 's/^\([[:space:]]*\)pp = 1/\1pp = 2\n\1schedule = 1f1b/' -e 's/micro_batch = 4.*/micro_batch = 2/' \
        "$root/examples/llama3.2-1b-2gpu-tp2.tp" >"$plans/llama1b-pp2.tp"
    for name in gpt2-dp2 llama1b-tp2 llama1b-pp2; do
        f=$plans/$name.tp
        if [ -n "$profile" ] && [ -n "$cat" ]; then
            sed -i -e "s/gpu = [A-Z0-9_]*/gpu = $cat/" -e "s#^\(cluster [a-z0-9_]* {\)#\1\n    profile = \"$profile\"#" "$f"
        fi
        echo "== planc run $name"
        "$planc" check "$f" --color never 2>/dev/null | sed -n '/^plan/p'  # run prices planc's own kernels
        "$planc" simulate "$f" --trace "$out/simulated-$name.json" >/dev/null 2>&1
        "$planc" run "$f" --steps 30 --trace "$out/measured-$name.json" --color never >"$out/run-$name.log" 2>&1 ||
            { echo "planc run failed:"; tail -n 5 "$out/run-$name.log"; continue; }
        sed -n '/^start/p;/^time/p;/^memory/p;/^speed/p;/^by kind/,$p' "$out/run-$name.log"
    done
fi
if want torch; then
    echo "== PyTorch DDP, 2 processes, same machine"
    python3 -m torch.distributed.run --standalone --nproc_per_node 2 "$root/.dev/torch_gpt_baseline.py" --attn flash 2>&1 | grep "^torch" | tail -n 1
fi
