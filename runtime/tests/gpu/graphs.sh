#!/usr/bin/env bash
# graphs.sh: CUDA graphs on a lent GPU, from the bundle (.dev/): the test that replayed
# steps train bit for bit as steps launched kernel by kernel (runtime/tests/graphs.rs), then
# `planc run` of GPT-2 124M (16 x 1024, flash attention) and Llama 3.2 1B with and without
# --no-graphs, each run's median step, speed and how its steps were launched.
#
#   runtime/tests/gpu/graphs.sh OUTDIR
#
# PARTS picks the parts (default "test gpt2 llama"); STEPS (default 30) steps a run.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out/plans"
parts=" ${PARTS:-test gpt2 llama} "
want() { [[ "$parts" == *" $1 "* ]]; }
steps=${STEPS:-30}
. "$here/env.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
case "$gpu" in *H100*) cat=H100_SXM_80GB ;; *) cat=H200_SXM_141GB ;; esac
status=0
if want test; then
    echo "== replayed steps against steps launched kernel by kernel (runtime/tests/graphs.rs)"
    if "$root/.dev/tests/graphs" --nocapture --test-threads=1 >"$out/test.log" 2>&1; then
        echo "ok"
    else
        echo "FAIL"
        status=1
    fi
    grep -E "^test |identical|SKIPPED|panicked|note:|error" "$out/test.log"
fi
# One example, flash attention, with and without graphs: NAME EXAMPLE.
pair() {
    local name=$1 f=$out/plans/$1.tp
    sed -e "s/attention = [a-z]*/attention = flash/" -e "s/gpu = [A-Z0-9_]*/gpu = $cat/" \
        -e '/profile = /d' "$root/examples/$2.tp" >"$f"
    for mode in graphs no-graphs; do
        local flag=
        [ "$mode" = no-graphs ] && flag=--no-graphs
        echo "-- planc run $name ($mode)"
        "$planc" run "$f" --steps "$steps" --color never $flag >"$out/run-$name-$mode.log" 2>&1
        local rc=$?
        [ "$rc" = 0 ] || { echo "exit $rc"; status=1; }
        grep -E "^(error|warning|note)" "$out/run-$name-$mode.log" | head -n 5
        sed -n '/^time/p;/^speed/p;/^graphs/p' "$out/run-$name-$mode.log"
    done
}
if want gpt2; then
    echo "== GPT-2 124M, 16 x 1024, flash"
    pair gpt2-124m-flash gpt2-124m-1gpu
fi
if want llama; then
    echo "== Llama 3.2 1B, 4 x 2048, flash"
    pair llama3.2-1b llama3.2-1b-1gpu
fi
exit $status
