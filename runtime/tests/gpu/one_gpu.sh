#!/usr/bin/env bash
# one_gpu.sh: the one-GPU checks of `planc run` in one call on a lent GPU machine, from the
# bundle bundle.sh builds (.dev/): the kernel tests (against PyTorch autograd and float64),
# the numerics against transformers, `planc calibrate`, and the speed beside PyTorch with
# each run's step by kind of work next to the prediction from this GPU's profile.
#
#   runtime/tests/gpu/one_gpu.sh OUTDIR
#
# PARTS picks the parts (default: all of "kernels numerics keep calibrate speed ops torch";
# keep runs keep.sh, a run that keeps its work; ops times one layer's operations of each
# speed plan, `planc run --ops`, after the runs). `calibrate` writes OUTDIR/profile.toml and
# the speed runs are priced from it; without it they are priced from the shipped profile of
# this GPU (PROFILE=file overrides both). KERNEL_TESTS narrows the kernel test binaries
# (each one's whole output is kept in OUTDIR/kernels/); NUMERICS_SETS runs numerics.sh once
# per "CASES/VARIANTS" set (default: every case), e.g. "llama-bf16/accum gpt-fp32,llama-fp32/".
# A part is skipped once the call has run BUDGET seconds (default 520), so a late part never
# cuts an earlier one's output off at the device's limit.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
parts=" ${PARTS:-kernels numerics keep calibrate speed ops torch} "
budget=${BUDGET:-520}
t0=$(date +%s)
want() {
    [[ "$parts" == *" $1 "* ]] || return 1
    local used=$(($(date +%s) - t0))
    if [ "$used" -ge "$budget" ]; then echo "== $1 skipped: $used s of $budget used"; return 1; fi
}
. "$here/env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if want kernels; then
    echo "== kernel tests"
    mkdir -p "$out/kernels"
    for t in ${KERNEL_TESTS:-autograd norms tp_kernels flash attention_cudnn fp8 graphs}; do
        timeout 240 "$root/.dev/tests/$t" --nocapture >"$out/kernels/$t.log" 2>&1
        rc=$?
        echo "-- $t: exit $rc, $(grep -c '^test .* ok$' "$out/kernels/$t.log") ok, $(grep -c 'FAILED\|panicked' "$out/kernels/$t.log") failed or panicked"
        grep -E "max rel|SKIPPED" "$out/kernels/$t.log" | head -n 8
    done
fi
if want numerics; then
    echo "== numerics"
    for set in ${NUMERICS_SETS:-all}; do
        if [ "$set" = all ]; then c=; v="flash recompute accum"; else c=${set%%/*}; v=${set#*/}; fi
        CASES=${c//,/ } VARIANTS=${v//,/ } PLANC=$planc timeout 300 "$here/numerics.sh" "$out/numerics" \
            >>"$out/numerics.log" 2>&1
        echo "exit $? ($set)"
        sed -n '/^case /,$p' "$out/numerics.log" | tail -n 20
        rm -rf "$out/numerics"
    done
fi
if want keep; then
    echo "== a run that keeps its work"
    timeout 150 "$here/keep.sh" "$out/keep" >"$out/keep.log" 2>&1
    echo "exit $?"
    grep -E "^(PASS|FAIL|==)" "$out/keep.log"
    rm -rf "$out/keep"
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
case "$gpu" in
    *H200*) profile=$root/compiler/catalog/profiles/h200_sxm_141gb.bf16.toml; cat=H200_SXM_141GB ;;
    *H100*) profile=$root/compiler/catalog/profiles/h100_sxm_80gb.bf16.toml; cat=H100_SXM_80GB ;;
    *) profile=; cat= ;;
esac
if want calibrate; then
    echo "== planc calibrate"
    "$planc" calibrate -o "$out/profile.toml" 2>&1 | tr "\r" "\n" | tail -n 25
    [ -s "$out/profile.toml" ] && profile=$out/profile.toml
fi
profile=${PROFILE:-$profile}
if want speed; then
    plans=$out/plans
    mkdir -p "$plans"
    for ex in gpt2-124m-1gpu llama3.2-1b-1gpu; do
        for attn in standard flash; do
            [ "$ex" = llama3.2-1b-1gpu ] && [ "$attn" = standard ] && continue
            f=$plans/$ex-$attn.tp
            sed -e "s/attention = [a-z]*/attention = $attn/" "$root/examples/$ex.tp" >"$f"
            if [ -n "$profile" ]; then
                sed -i -e "s/gpu = [A-Z0-9_]*/gpu = $cat/" -e "s#^\(cluster [a-z0-9_]* {\)#\1\n    profile = \"$profile\"#" "$f"
            fi
            echo "== planc run $ex ($attn attention)"
            # About 10 s of steps: the power limit's steady state takes seconds to settle
            # (GPT-2 over 30 steps, one second, drew 516 W; over 600, 695 W and 3 % slower).
            steps=80
            [ "$ex" = gpt2-124m-1gpu ] && steps=300
            "$planc" run "$f" --steps $steps --color never >"$out/run-$ex-$attn.log" 2>&1
            sed -n '/^start/p;/^time/p;/^memory/p;/^speed/p;/^by kind/,$p' "$out/run-$ex-$attn.log"
            if want ops; then
                "$planc" run "$f" --ops --color never >"$out/ops-$ex-$attn.log" 2>&1
                sed -n '/operation/,$p' "$out/ops-$ex-$attn.log"
            fi
        done
    done
    # GPT-2 flash as torch_gpt_baseline.py trains it: clipping nothing, so taking no norm.
    f=$plans/gpt2-124m-1gpu-flash-noclip.tp
    sed -e "s/^train {/train {\n    grad_clip = 0/" "$plans/gpt2-124m-1gpu-flash.tp" >"$f"
    echo "== planc run gpt2-124m-1gpu (flash attention, grad_clip = 0)"
    "$planc" run "$f" --steps 300 --color never >"$out/run-gpt2-noclip.log" 2>&1
    sed -n '/^start/p;/^time/p;/^memory/p;/^speed/p' "$out/run-gpt2-noclip.log"
    # GPT 6.6B (1 x 2048, global batch 1): issue 26's third speed plan, beside the 6.6B
    # eager baseline of the torch part.
    f=$plans/gpt6.6b.tp
    cp "$here/plans/gpt6.6b.tp" "$f"
    [ -n "$profile" ] && sed -i -e "s#^\(cluster [a-z0-9_]* {\)#\1 profile = \"$profile\",#" "$f"
    echo "== planc run gpt6.6b"
    "$planc" run "$f" --steps 50 --color never >"$out/run-gpt6.6b.log" 2>&1
    sed -n '/^start/p;/^time/p;/^memory/p;/^speed/p;/^by kind/,$p' "$out/run-gpt6.6b.log"
fi
if want torch; then
    echo "== PyTorch, same machine"
    base=$root/.dev/torch_gpt_baseline.py  # bundle.sh copies runtime/tests/gpu's
    for args in "--attn standard" "--attn flash" "--attn flash --compile"; do
        # As many steps as planc's GPT-2 runs: both at the limit's steady state.
        echo "-- GPT-2 124M 16x1024 $args: $(timeout 150 python3 "$base" $args --steps 300 2>&1 | tail -n 1)"
    done
    big="--layers 32 --hidden 4096 --heads 32 --seq 2048 --batch 1 --steps 15"
    echo "-- GPT 6.6B 1x2048 eager: $(timeout 100 python3 "$base" $big 2>&1 | tail -n 1)"
    echo "-- Llama 3.2 1B 4x2048 transformers: $(python3 "$here/llama_baseline.py" 2>&1 | tail -n 1)"
fi
