#!/usr/bin/env bash
# numerics.sh: planc's training against an independent PyTorch replay, on a GPU machine.
#
#   PLANC=target/release/planc runtime/tests/gpu/numerics.sh OUTDIR
#   CASES="gpt-bf16 llama-bf16" VARIANTS="" PLANC=… numerics.sh OUTDIR   # a subset
#
# For each test plan here and its variants (flash attention, full recompute, gradient
# accumulation in 4 micro-batches) it runs `planc run` for $STEPS steps, then reference.py
# replays the same steps in torch from planc's step-0 checkpoint and compares every loss.
# Then the resume check: 7 steps, --resume for 13 more, against the uninterrupted run.
# Every case runs whatever failed before it; the table at the end says which failed, and
# the exit status is 1 if any did. Needs python3 with torch + transformers (numpy) for compare.
set -u
here=$(cd "$(dirname "$0")" && pwd)
PLANC=${PLANC:-planc}
PY=${PYTHON:-python3}
STEPS=${STEPS:-20}
out=${1:?usage: PLANC=path/to/planc $0 OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1
ref="$here/reference.py"

# The plans read data = "tokens.bin" beside themselves: copies go to OUTDIR/plans with the
# token file, so the repository stays clean. 30011 tokens (prime) is less than 20 steps
# read (20·8·256 + 1), so the run also crosses the contract's wrap-around mid-sample.
plans="$out/plans"
rm -rf "$plans" && mkdir -p "$plans"
"$PY" "$ref" make-data "$plans/tokens.bin" --vocab 4096 --tokens 30011 --seed 1 || exit 2

names=() results=() details=()
record() { names+=("$1"); results+=("$2"); details+=("$3"); echo "== $1: $2 $3"; }

# attr NAME FILE: the value of a one-a-line attribute (the test plans keep that form).
attr() { sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\([^[:space:],#]*\).*/\1/p" "$2" | head -1; }

# variant BASE NAME SED: BASE.tp rewritten; refuses a rewrite that changed nothing, which
# would silently test the base plan twice.
variant() {
    sed "$3" "$here/$1.tp" >"$plans/$2.tp"
    if cmp -s "$here/$1.tp" "$plans/$2.tp"; then
        record "$2" FAIL "(sed '$3' changed nothing in $1.tp)"
        rm -f "$plans/$2.tp"
        return 1
    fi
}

# run_case NAME: planc run, then the torch replay of the same steps.
run_case() {
    local name=$1 plan="$plans/$1.tp" d="$out/$1"
    rm -rf "$d" && mkdir -p "$d"
    local mb gb seq prec
    mb=$(attr micro_batch "$plan") gb=$(attr global_batch "$plan")
    seq=$(attr seq_len "$plan") prec=$(attr precision "$plan")
    echo "== $name: planc run (precision $prec, micro_batch $mb of $gb)"
    "$PLANC" run "$plan" --steps "$STEPS" --save "$d/ckpt" --metrics "$d/metrics.jsonl" \
        >"$d/planc.log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
        tail -n 20 "$d/planc.log"
        record "$name" FAIL "(planc run exited $rc; $d/planc.log)"
        return
    fi
    tail -n 3 "$d/planc.log"
    "$PY" "$ref" compare --ckpt "$d/ckpt/step-0000000" --metrics "$d/metrics.jsonl" \
        --data "$plans/tokens.bin" --micro-batch "$mb" --global-batch "$gb" --seq "$seq" \
        --steps "$STEPS" --precision "$prec" --lr "$(attr lr "$plan")" \
        --beta1 "$(attr adam_beta1 "$plan")" --beta2 "$(attr adam_beta2 "$plan")" \
        --eps "$(attr adam_eps "$plan")" --weight-decay "$(attr weight_decay "$plan")" \
        --clip "$(attr grad_clip "$plan")" 2>&1 | tee "$d/compare.log"
    rc=${PIPESTATUS[0]}
    local diff
    diff=$(tail -n 1 "$d/compare.log" | sed -n 's/.*"max_rel_loss_diff": \([^,}]*\).*/\1/p')
    if [ $rc -eq 0 ]; then
        record "$name" ok "max rel loss diff ${diff:-?}"
    else
        [ -n "$diff" ] || diff="? ($(grep -m1 '^error' "$d/compare.log"))"
        record "$name" FAIL "max rel loss diff $diff (compare exited $rc; $d/compare.log)"
    fi
}

# resume_case BASE: 7 steps saved at step 7, then --resume for the rest; the resumed
# steps' losses must equal the uninterrupted run's (BASE's own case, run above).
resume_case() {
    local base=$1 name="$1-resume" plan="$plans/$1.tp" d="$out/$1-resume"
    local full="$out/$1/metrics.jsonl" k=7
    rm -rf "$d" && mkdir -p "$d"
    if [ ! -s "$full" ]; then
        record "$name" FAIL "(no uninterrupted run to compare with: $full)"
        return
    fi
    echo "== $name: $k steps, then --resume for $((STEPS - k))"
    if ! "$PLANC" run "$plan" --steps $k --save "$d/ckpt" --save-every $k \
        --metrics "$d/first.jsonl" >"$d/first.log" 2>&1; then
        tail -n 20 "$d/first.log"
        record "$name" FAIL "(planc run --steps $k failed; $d/first.log)"
        return
    fi
    if ! "$PLANC" run "$plan" --resume "$d/ckpt" --steps $((STEPS - k)) \
        --metrics "$d/resumed.jsonl" >"$d/resumed.log" 2>&1; then
        tail -n 20 "$d/resumed.log"
        record "$name" FAIL "(planc run --resume failed; $d/resumed.log)"
        return
    fi
    # The first leg is the same run as the uninterrupted one up to step k: a difference
    # there is nondeterminism, not a resume bug, so it is reported apart.
    "$PY" "$ref" same-losses "$full" "$d/first.jsonl" --first 1 --last $k --tol 1e-6 \
        >"$d/first-check.log" 2>&1
    local det=$?
    "$PY" "$ref" same-losses "$full" "$d/resumed.jsonl" --first $((k + 1)) --last "$STEPS" \
        --tol 1e-6 2>&1 | tee "$d/check.log"
    local rc=${PIPESTATUS[0]} diff
    diff=$(tail -n 1 "$d/check.log" | sed -n 's/.*"max_rel_loss_diff": \([^,}]*\).*/\1/p')
    local note=""
    [ $det -ne 0 ] && note=" (steps 1-$k already differ: nondeterminism; $d/first-check.log)"
    if [ $rc -eq 0 ]; then
        record "$name" ok "steps $((k + 1))-$STEPS max rel loss diff ${diff:-?}$note"
    else
        record "$name" FAIL "steps $((k + 1))-$STEPS max rel loss diff ${diff:-?}$note"
    fi
}

# CASES and VARIANTS narrow a run (a short check after a small change); the default is
# every case: 4 plans × (base + 3 variants) + 2 resumes.
cases=${CASES:-gpt-fp32 llama-fp32 gpt-bf16 llama-bf16}
variants=" ${VARIANTS-flash recompute accum} "
has() { [[ "$variants" == *" $1 "* ]]; }
for p in $cases; do
    cp "$here/$p.tp" "$plans/$p.tp"
    run_case "$p"
    has flash && variant "$p" "$p-flash" 's/^\([[:space:]]*attention[[:space:]]*=[[:space:]]*\)standard/\1flash/' &&
        run_case "$p-flash"
    has recompute && variant "$p" "$p-recompute" 's/^\([[:space:]]*recompute[[:space:]]*=[[:space:]]*\)none/\1full/' &&
        run_case "$p-recompute"
    has accum && variant "$p" "$p-accum" 's/^\([[:space:]]*micro_batch[[:space:]]*=[[:space:]]*\)8/\12/' &&
        run_case "$p-accum"
done
for p in $cases; do
    case $p in *fp32) resume_case "$p" ;; esac
done

echo
printf '%-22s %-5s %s\n' case result detail
failed=0
for i in "${!names[@]}"; do
    printf '%-22s %-5s %s\n' "${names[$i]}" "${results[$i]}" "${details[$i]}"
    [ "${results[$i]}" = ok ] || failed=$((failed + 1))
done
echo "$(( ${#names[@]} - failed )) passed, $failed failed"
[ $failed -eq 0 ]
