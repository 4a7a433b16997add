#!/usr/bin/env bash
# keep.sh: a run keeps its work, on one lent GPU, in one call (the bundle of bundle.sh, .dev/):
#
#   runtime/tests/gpu/keep.sh OUTDIR
#
# diverge  GPT-2 124M in bf16 at lr = $LR (default 10): the run must stop with exit 1 at the
#          first step whose loss or gradient norm is not finite (within a step of the first
#          non-finite loss), name that step, and leave no checkpoint of non-finite weights
#          (--save-every 1: every checkpoint it wrote is read back and checked).
# diverge0 grad_clip = 0, where the step takes no gradient norm, and a NaN gradient planted in
#          step 3 (PLANC_FAULT=nan-grad:0:3): the update finds it, the run exits 1 after step
#          3 saying so, its newest checkpoint is step 2's, every checkpoint finite.
# preempt  a small fp32 GPT sent SIGTERM mid-training must finish its step, save it and exit
#          75 (preempted); `--resume` starts after the step it reached and gives the losses
#          of an uninterrupted run (relative 1e-6), then SIGUSR1 without --save: exit 75 and
#          says nothing was saved.
#          LAYOUT=dp2|tp2|pp2 runs it on two GPUs in that layout: the launcher forwards the
#          signal to both ranks, which agree on the step to stop after (through the step's
#          scalar sums), both save it and the run exits 75.
# Prints one PASS or FAIL line per check; exit 1 if any failed. PARTS picks the parts.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
parts=" ${PARTS:-diverge diverge0 preempt} "
want() { [[ "$parts" == *" $1 "* ]]; }
. "$here/env.sh"
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
failed=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }

# steps FILE: "step loss grad_norm" per metrics line (non-finite figures are JSON null).
steps() {
    "$PY" -c 'import json,sys
for l in open(sys.argv[1]):
    m = json.loads(l)
    print(m["step"], m["loss"], m["grad_norm"])' "$1"
}

# finite_checkpoints DIR: every step-*/model.safetensors holds finite values only.
finite_checkpoints() {
    "$PY" - "$1" <<'EOF'
import glob, json, struct, sys
import numpy as np
bad = 0
for f in sorted(glob.glob(sys.argv[1] + "/step-*/model.safetensors")):
    raw = open(f, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        buf = raw[8 + n + a:8 + n + b]
        if t["dtype"] == "F32":
            x = np.frombuffer(buf, "<f4")
        elif t["dtype"] == "BF16":
            x = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            x = np.frombuffer(buf, "<f2").astype(np.float32)
        if not np.isfinite(x).all():
            print(f"{f}: {name} is not finite")
            bad += 1
print(f"{len(glob.glob(sys.argv[1] + '/step-*/model.safetensors'))} checkpoints read, {bad} non-finite tensors")
sys.exit(1 if bad else 0)
EOF
}

if want diverge; then
    echo "== diverge: gpt2-124m-1gpu, bf16, lr ${LR:-10}"
    d=$out/diverge
    rm -rf "$d" && mkdir -p "$d"
    sed -e "s/^train {/train {\n    lr = ${LR:-10}\n    lr_schedule = constant\n    warmup_steps = 0/" \
        "$root/examples/gpt2-124m-1gpu.tp" >"$d/plan.tp"
    "$planc" run "$d/plan.tp" --steps 40 --save "$d/ckpt" --save-every 1 \
        --metrics "$d/metrics.jsonl" --color never >"$d/run.log" 2>&1
    rc=$?
    tail -n 4 "$d/run.log"
    steps "$d/metrics.jsonl" >"$d/steps.txt" 2>/dev/null
    first_loss=$(awk '$2 == "None" || $2 == "nan" || $2 == "inf" {print $1; exit}' "$d/steps.txt")
    first_any=$(awk '$2 == "None" || $3 == "None" {print $1; exit}' "$d/steps.txt")
    last=$(tail -n 1 "$d/steps.txt" | cut -d' ' -f1)
    if [ -z "$first_any" ]; then
        fail "diverge: no non-finite loss or gradient norm in ${last:-0} steps at lr ${LR:-10} (exit $rc; inconclusive: LR=100 $0 …)"
    elif [ $rc -ne 1 ]; then
        fail "diverge: first non-finite at step $first_any, but the run exited $rc (want 1), last step $last"
    elif [ "$last" != "$first_any" ]; then
        fail "diverge: first non-finite at step $first_any, but the run went on to step $last"
    elif [ -n "$first_loss" ] && [ "$last" -gt $((first_loss + 1)) ]; then
        fail "diverge: first non-finite loss at step $first_loss, stopped after step $last"
    elif ! grep -q "error: step $last: " "$d/run.log"; then
        fail "diverge: exit 1 after step $last, but the error does not name the step ($d/run.log)"
    else
        pass "diverge: stopped with exit 1 after step $last (first non-finite loss: step ${first_loss:-none, the norm first}): $(grep -m1 '^error' "$d/run.log" | cut -c1-300)"
    fi
    ls "$d/ckpt" >"$d/checkpoints.txt" 2>&1
    newest=$(ls -d "$d"/ckpt/step-* 2>/dev/null | tail -n 1)
    if finite_checkpoints "$d/ckpt" >"$d/finite.txt" 2>&1; then
        pass "diverge: checkpoints finite ($(tail -n 1 "$d/finite.txt"); newest ${newest##*/})"
    else
        fail "diverge: $(head -n 3 "$d/finite.txt" | tr '\n' ' ')"
    fi
    if [ -n "$newest" ] && [ -n "$last" ] && [ "$((10#${newest##*step-}))" -ge "$last" ]; then
        fail "diverge: a checkpoint of step ${newest##*/} was written at or after the diverged step $last"
    fi
    rm -rf "$d/ckpt"
fi

if want diverge0; then
    # A NaN planted in a gradient of step 3 (PLANC_FAULT=nan-grad:0:3, as an overflow in
    # backward would leave it; training at a large learning rate without clipping stays
    # finite under AdamW, whose steps are lr-sized whatever the gradients).
    echo "== diverge0: gpt2-124m-1gpu, bf16, grad_clip = 0, a NaN gradient planted in step 3"
    d=$out/diverge0
    rm -rf "$d" && mkdir -p "$d"
    sed -e "s/^train {/train {\n    grad_clip = 0/" "$root/examples/gpt2-124m-1gpu.tp" >"$d/plan.tp"
    PLANC_FAULT=nan-grad:0:3 "$planc" run "$d/plan.tp" --steps 6 --save "$d/ckpt" --save-every 1 \
        --metrics "$d/metrics.jsonl" --color never >"$d/run.log" 2>&1
    rc=$?
    tail -n 4 "$d/run.log"
    steps "$d/metrics.jsonl" >"$d/steps.txt" 2>/dev/null
    last=$(tail -n 1 "$d/steps.txt" | cut -d' ' -f1)
    norms=$(awk '$3 != "None"' "$d/steps.txt" | wc -l)
    newest=$(ls -d "$d"/ckpt/step-* 2>/dev/null | tail -n 1)
    if [ $rc -ne 1 ] || [ "$last" != 3 ]; then
        fail "diverge0: the run exited $rc after step ${last:-none} (want 1 after step 3)"
    elif [ "$norms" -ne 0 ]; then
        fail "diverge0: $norms steps reported a gradient norm with grad_clip = 0"
    elif ! grep -q "error: step 3: .*found by the update" "$d/run.log"; then
        fail "diverge0: exit 1 after step 3, but the error does not say the update found it"
    elif [ "${newest##*/}" != step-0000002 ]; then
        fail "diverge0: the newest checkpoint is ${newest##*/} (want step-0000002)"
    elif ! finite_checkpoints "$d/ckpt" >"$d/finite.txt" 2>&1; then
        fail "diverge0: $(head -n 3 "$d/finite.txt" | tr '\n' ' ')"
    else
        pass "diverge0: stopped with exit 1 after step 3, $(tail -n 1 "$d/finite.txt"): $(grep -m1 '^error' "$d/run.log" | cut -c1-400)"
    fi
    rm -rf "$d/ckpt"
fi

if want preempt; then
    N=${N:-400}
    d=$out/preempt
    rm -rf "$d" && mkdir -p "$d"
    # The small fp32 GPT of numerics.sh on the synthetic corpus (no token file needed).
    sed -e '/^[[:space:]]*data[[:space:]]*=/d' "$here/gpt-fp32.tp" >"$d/plan.tp"
    case ${LAYOUT:-} in
        dp2 | tp2 | pp2)
            sed -i -e 's/gpus_per_node = 1/gpus_per_node = 2/' \
                -e "s/^\([[:space:]]*${LAYOUT%2}[[:space:]]*=[[:space:]]*\)1/\12/" "$d/plan.tp"
            # Two data-parallel ranks of one micro-batch of 8 each.
            [ "$LAYOUT" = dp2 ] && sed -i -e 's/global_batch = 8/global_batch = 16/' "$d/plan.tp"
            echo "== preempt: on two GPUs, ${LAYOUT%2} = 2"
            ;;
        "") ;;
        *) echo "LAYOUT=$LAYOUT: dp2, tp2 or pp2" && exit 2 ;;
    esac
    echo "== preempt: uninterrupted, $N steps"
    "$planc" run "$d/plan.tp" --steps "$N" --metrics "$d/full.jsonl" --color never \
        >"$d/full.log" 2>&1 || fail "preempt: the uninterrupted run exited $? ($d/full.log)"
    echo "== preempt: SIGTERM once 50 steps are done"
    "$planc" run "$d/plan.tp" --steps "$N" --save "$d/ckpt" --metrics "$d/first.jsonl" \
        --color never >"$d/first.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 1200); do
        [ "$(wc -l <"$d/first.jsonl" 2>/dev/null || echo 0)" -ge 50 ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.05
    done
    sent=$(wc -l <"$d/first.jsonl" 2>/dev/null || echo 0)
    t0=$(date +%s%N)
    kill -TERM $pid
    wait $pid
    rc=$?
    took=$(( ($(date +%s%N) - t0) / 1000000 ))
    tail -n 2 "$d/first.log"
    S=$(tail -n 1 "$d/first.jsonl" | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
    saved=$(cat "$d/ckpt/latest" 2>/dev/null)
    if [ $rc -ne 75 ]; then
        fail "preempt: SIGTERM after $sent steps: exit $rc, want 75 ($d/first.log)"
    elif [ -z "$S" ] || [ "$S" -ge "$N" ]; then
        fail "preempt: the run reached step ${S:-?} of $N: SIGTERM came too late to test (N=… larger)"
    elif ! ls -d "$d/ckpt/step-$(printf %07d "$S")" >/dev/null 2>&1; then
        fail "preempt: stopped after step $S but no checkpoint of it (latest: ${saved:-none}; $(ls "$d/ckpt" | tr '\n' ' '))"
    elif [ "$S" -gt $((sent + 2)) ]; then
        fail "preempt: SIGTERM with $sent steps done, but the run went on to step $S"
    else
        pass "preempt: SIGTERM with $sent steps in the metrics, stopped after step $S with exit 75 in ${took} ms, saved step-$(printf %07d "$S")"
    fi
    echo "== preempt: --resume for the remaining $((N - S)) steps"
    "$planc" run "$d/plan.tp" --resume "$d/ckpt" --save "$d/ckpt" --steps $((N - S)) \
        --metrics "$d/resumed.jsonl" --color never >"$d/resumed.log" 2>&1
    rc=$?
    R=$(head -n 1 "$d/resumed.jsonl" 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p')
    if [ $rc -ne 0 ]; then
        fail "preempt: the resumed run exited $rc ($d/resumed.log)"
    elif [ "${R:-0}" != $((S + 1)) ]; then
        fail "preempt: the resumed run began at step ${R:-?}, want $((S + 1))"
    elif "$PY" "$here/reference.py" same-losses "$d/full.jsonl" "$d/resumed.jsonl" \
        --first $((S + 1)) --last "$N" --tol 1e-6 >"$d/check.log" 2>&1; then
        pass "preempt: resumed at step $R; steps $R-$N agree with the uninterrupted run: $(tail -n 1 "$d/check.log")"
    else
        det=""
        "$PY" "$here/reference.py" same-losses "$d/full.jsonl" "$d/first.jsonl" --first 1 \
            --last "$S" --tol 1e-6 >/dev/null 2>&1 || det=" (steps 1-$S already differ: nondeterminism)"
        fail "preempt: steps $((S + 1))-$N differ from the uninterrupted run$det: $(tail -n 1 "$d/check.log")"
    fi
    echo "== preempt: SIGUSR1 without --save"
    "$planc" run "$d/plan.tp" --steps "$N" --metrics "$d/usr1.jsonl" --color never \
        >"$d/usr1.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 1200); do
        [ "$(wc -l <"$d/usr1.jsonl" 2>/dev/null || echo 0)" -ge 20 ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.05
    done
    kill -USR1 $pid
    wait $pid
    rc=$?
    if [ $rc -eq 75 ] && grep -q "nothing saved" "$d/usr1.log"; then
        pass "preempt: SIGUSR1 without --save: exit 75, $(grep -m1 '^stopped' "$d/usr1.log")"
    else
        fail "preempt: SIGUSR1 without --save: exit $rc ($d/usr1.log: $(tail -n 1 "$d/usr1.log"))"
    fi
    rm -rf "$d/ckpt"
fi
echo "keep.sh: $failed failed"
[ $failed -eq 0 ]
