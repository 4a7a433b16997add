#!/usr/bin/env bash
# unseen.sh: issues 26 and 27 on a lent GPU, from the bundle (.dev/): a fresh `planc
# calibrate`, then each plan of runtime/tests/gpu/plans/ and the speed examples run by
# `planc run` twice, priced from the fresh profile (written into a copy of the plan) and
# without one (the shipped profile of this GPU, as a user who never calibrates gets), each
# run's step and step by kind of work beside its prediction; the whole Llama 3 8B with
# `--layers 2`; PyTorch's side of the speed comparison in the same call.
#
#   runtime/tests/gpu/unseen.sh OUTDIR
#
# PARTS picks the parts (default "calibrate plans speed torch"); PROFILE=file skips the
# calibration and prices from that file; SHIPPED=0 skips the runs priced from the shipped
# profile; STEPS (default 20) steps a run; MARKS=file gets
# each run's start and end time (clocks.sh reads them beside the sampled SM clock).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out/plans"
parts=" ${PARTS:-calibrate plans speed torch} "
want() { [[ "$parts" == *" $1 "* ]]; }
steps=${STEPS:-20}
. "$here/env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
profile=${PROFILE:-}
if want calibrate && [ -z "$profile" ]; then
    echo "== planc calibrate"
    "$planc" calibrate -o "$out/profile.toml" 2>&1 | tr "\r" "\n" | grep -v "^\s*$" | tail -n 40
    [ -s "$out/profile.toml" ] && profile=$out/profile.toml
fi
# One run: NAME PLAN [planc run args...]; prints the lines that compare it.
run() {
    local name=$1 plan=$2
    shift 2
    echo "== $name"
    [ -n "${MARKS:-}" ] && echo "start $name $(date +%s.%N)" >>"$MARKS"
    "$planc" run "$plan" --steps "$steps" --color never "$@" >"$out/run-$name.log" 2>&1
    echo "exit $?"
    [ -n "${MARKS:-}" ] && echo "end $name $(date +%s.%N)" >>"$MARKS"
    grep -E "^(error|warning)" "$out/run-$name.log" | head -n 5
    sed -n '/^start/p;/^time/p;/^memory/p;/^speed/p;/^by kind/,$p' "$out/run-$name.log"
}
# Both pricings of one plan file.
both() {
    local name=$1 src=$2
    shift 2
    if [ -n "$profile" ]; then
        local f=$out/plans/$name.tp
        # A cluster block over several lines, else on one.
        sed -e "s#^\(cluster [a-z0-9_]* {\)\$#\1\n    profile = \"$profile\"#" "$src" >"$f"
        grep -q "profile = " "$f" ||
            sed -i -e "s#^\(cluster [a-z0-9_]* {\)#\1 profile = \"$profile\",#" "$f"
        run "$name-profiled" "$f" "$@"
    fi
    [ "${SHIPPED:-1}" = 1 ] && run "$name-shipped" "$src" "$@"
}
if want plans; then
    for p in llama3b-gqa gpt1p3b-standard llama3-8b-8layers; do
        both "$p" "$here/plans/$p.tp"
    done
    SHIPPED=${SHIPPED:-1} both llama3-8b-layers2 "$here/plans/llama3-8b.tp" --layers 2
fi
if want speed; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
    case "$gpu" in *H100*) cat=H100_SXM_80GB ;; *) cat=H200_SXM_141GB ;; esac
    # The sources apart from the copies `both` writes ($out/plans/NAME.tp), which would
    # otherwise truncate the file they read.
    mkdir -p "$out/plans/src"
    for ex in gpt2-124m-1gpu llama3.2-1b-1gpu; do
        f=$out/plans/src/$ex.tp
        sed -e "s/gpu = [A-Z0-9_]*/gpu = $cat/" -e '/profile = /d' "$root/examples/$ex.tp" >"$f"
        both "$ex" "$f"
    done
    # GPT-2 with flash attention too: issue 26 sets it beside torch.compile's.
    sed -e "s/attention = standard/attention = flash/" "$out/plans/src/gpt2-124m-1gpu.tp" >"$out/plans/src/gpt2-124m-flash.tp"
    both gpt2-124m-flash "$out/plans/src/gpt2-124m-flash.tp"
    both gpt6.6b "$here/plans/gpt6.6b.tp"
fi
if want torch; then
    echo "== PyTorch, same machine (tokens/s)"
    base=$here/torch_gpt_baseline.py
    for args in "--attn flash" "--attn flash --compile" "--attn standard"; do
        echo "-- GPT-2 124M 16x1024 $args: $(python3 "$base" $args 2>&1 | tail -n 1)"
    done
    echo "-- GPT 6.6B 1x2048 eager: $(python3 "$base" --layers 32 --hidden 4096 --heads 32 --seq 2048 --batch 1 --steps 15 2>&1 | tail -n 1)"
    echo "-- Llama 3.2 1B 4x2048 transformers: $(python3 "$here/llama_baseline.py" 2>&1 | tail -n 1)"
fi
