#!/usr/bin/env bash
# one_gpu.sh: the one-GPU checks of `planc run` in one call on a lent GPU machine, from the
# bundle bundle.sh builds (.dev/): the kernel tests (against PyTorch autograd and float64),
# the numerics against transformers, `planc calibrate`, and the speed beside PyTorch with
# each run's step by kind of work next to the prediction from this GPU's profile.
#
#   runtime/tests/gpu/one_gpu.sh OUTDIR
#
# PARTS picks the parts (default: all of "kernels numerics calibrate speed ops torch"; ops
# times one layer's operations of each speed plan, `planc run --ops`, after the runs).
# `calibrate` writes OUTDIR/profile.toml and the speed runs are priced from it; without
# it they are priced from the shipped profile of this GPU (PROFILE=file overrides both).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
parts=" ${PARTS:-kernels numerics calibrate speed ops torch} "
want() { [[ "$parts" == *" $1 "* ]]; }
. "$here/env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if want kernels; then
    echo "== kernel tests"
    for t in autograd norms tp_kernels flash attention_cudnn fp8; do
        "$root/.dev/tests/$t" --nocapture 2>&1 | grep -E "max rel|^test |SKIPPED|panicked|FAIL" | tee "$out/$t.log"
    done
fi
if want numerics; then
    echo "== numerics"
    PLANC=$planc "$here/numerics.sh" "$out/numerics" >"$out/numerics.log" 2>&1
    tail -n 20 "$out/numerics.log"
    rm -rf "$out/numerics"
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
            "$planc" run "$f" --steps 30 --color never >"$out/run-$ex-$attn.log" 2>&1
            sed -n '/^start/p;/^time/p;/^memory/p;/^speed/p;/^by kind/,$p' "$out/run-$ex-$attn.log"
            if want ops; then
                "$planc" run "$f" --ops --color never >"$out/ops-$ex-$attn.log" 2>&1
                sed -n '/operation/,$p' "$out/ops-$ex-$attn.log"
            fi
        done
    done
fi
if want torch; then
    echo "== PyTorch, same machine"
    base=$root/.dev/torch_gpt_baseline.py  # bundle.sh copies runtime/tests/gpu's
    python3 "$base" --attn standard 2>&1 | tail -n 1
    python3 "$base" --attn flash 2>&1 | tail -n 1
    python3 "$here/llama_baseline.py" 2>&1 | tail -n 1
fi
