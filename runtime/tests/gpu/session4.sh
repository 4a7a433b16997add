#!/usr/bin/env bash
# session4.sh: one call on a lent H200 for issues 25 and 26: the kernel tests against
# autograd (each binary's whole output kept), the numerics against the PyTorch replay and
# resume, a run that keeps its work (keep.sh), then the speed plans from the shipped profile
# beside PyTorch eager and torch.compile in the same call.
#
#   runtime/tests/gpu/session4.sh OUTDIR        # PARTS="kernels numerics keep speed torch"
#
# Each part is skipped once the call has run BUDGET seconds (default 520), so a late part
# never cuts the output of an earlier one.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
. "$here/env.sh"
parts=" ${PARTS:-kernels numerics keep speed torch} "
# KERNEL_TESTS narrows the kernels part; NUMERICS_SETS runs numerics.sh once per
# "CASES/VARIANTS" set (default: every case), e.g. "llama-bf16/accum gpt-fp32,llama-fp32/".
tests=${KERNEL_TESTS:-autograd norms tp_kernels flash attention_cudnn fp8 graphs}
budget=${BUDGET:-520}
t0=$(date +%s)
want() {
    [[ "$parts" == *" $1 "* ]] || return 1
    local used=$(($(date +%s) - t0))
    if [ "$used" -ge "$budget" ]; then echo "== $1 skipped: $used s of $budget used"; return 1; fi
    echo "== $1 (at $used s)"
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
if want kernels; then
    mkdir -p "$out/kernels"
    for t in $tests; do
        timeout 120 "$root/.dev/tests/$t" --nocapture >"$out/kernels/$t.log" 2>&1
        rc=$?
        echo "-- $t: exit $rc, $(grep -c '^test .* ok$' "$out/kernels/$t.log") ok, $(grep -c 'FAILED\|panicked' "$out/kernels/$t.log") failed/panicked; $(grep -ciE 'skipped' "$out/kernels/$t.log") skipped lines"
        grep -E "max rel|max abs|worst" "$out/kernels/$t.log" | head -n 8
    done
fi
if want numerics; then
    for set in ${NUMERICS_SETS:-all}; do
        if [ "$set" = all ]; then c=; v="flash recompute accum"; else c=${set%%/*}; v=${set#*/}; fi
        CASES=${c//,/ } VARIANTS=${v//,/ } PLANC=$planc timeout 300 "$here/numerics.sh" "$out/numerics" \
            >>"$out/numerics.log" 2>&1
        echo "exit $? ($set)"
        sed -n '/^case /,$p' "$out/numerics.log" | tail -n 12
        rm -rf "$out/numerics"
    done
fi
if want keep; then
    timeout 150 "$here/keep.sh" "$out/keep" >"$out/keep.log" 2>&1
    echo "exit $?"
    grep -E "^(PASS|FAIL|==)" "$out/keep.log"
    rm -rf "$out/keep"
fi
if want speed; then
    STEPS=30 PARTS=speed SHIPPED=1 timeout 240 "$here/unseen.sh" "$out/u"
fi
if want torch; then
    base=$here/torch_gpt_baseline.py
    for args in "--attn flash" "--attn flash --compile"; do
        echo "-- GPT-2 124M 16x1024 $args: $(timeout 150 python3 "$base" $args 2>&1 | tail -n 1)"
    done
    echo "-- GPT 6.6B 1x2048 eager: $(timeout 100 python3 "$base" --layers 32 --hidden 4096 --heads 32 --seq 2048 --batch 1 --steps 15 2>&1 | tail -n 1)"
fi
echo "== done at $(($(date +%s) - t0)) s"
