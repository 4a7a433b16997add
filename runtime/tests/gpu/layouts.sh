#!/usr/bin/env bash
# layouts.sh: planc run across 2 GPUs against the one-GPU run of the same plan, on a machine
# with 2 GPUs. Needs python3 (reference.py make-data and same-losses need no torch).
#
#   runtime/tests/gpu/layouts.sh OUTDIR     # PLANC=path/to/planc: another binary than .dev's
#
# Cases (PARTS and BASES narrow them): dp 2 with zero 0 and zero 1, tp 2 with and without sequence parallelism (and with
# flash attention and full recompute), pp 2 with 1f1b, gpipe and interleaved (vpp 2, a
# layer a virtual stage) over 4 micro-batches of 2, each within 1e-4 (fp32) or 2e-2 (bf16) of one GPU; a tp 2 and a pp 2
# checkpoint resumed on one GPU; two node processes meeting over loopback, a rank killed mid-run (named error, no process
# left), a planted stalled rank (the watchdog names the wait within PLANC_TIMEOUT_S), two
# node processes with different --steps (refused at the rendezvous).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
PLANC=$planc
PY=${PYTHON:-python3}
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
ref="$here/reference.py"
plans="$out/plans"
rm -rf "$plans" && mkdir -p "$plans"
"$PY" "$ref" make-data "$plans/tokens.bin" --vocab 4096 --tokens 30011 --seed 1 >/dev/null || exit 2
results=()
record() { results+=("$1: $2"); echo "== $1: $2"; }

# two_gpus BASE NAME ZERO: BASE with the cluster widened to 2 GPUs and dp 2, each rank a
# micro-batch of half the global batch (the same 8 sequences a step as one GPU's).
two_gpus() {
    sed -e 's/gpus_per_node = 1/gpus_per_node = 2/' -e 's/^\([[:space:]]*dp[[:space:]]*=[[:space:]]*\)1/\12/' \
        -e 's/micro_batch = 8/micro_batch = 4/' \
        -e "s/^\([[:space:]]*tp[[:space:]]*=.*\)/\1\n    zero = $3/" "$here/$1.tp" >"$plans/$2.tp"
}

# tensor_parallel BASE NAME SP [SED...]: BASE with the cluster widened to 2 GPUs and tp 2.
tensor_parallel() {
    local base=$1 name=$2 sp=$3
    shift 3
    sed -e 's/gpus_per_node = 1/gpus_per_node = 2/' -e 's/^\([[:space:]]*tp[[:space:]]*=[[:space:]]*\)1/\12/' \
        -e "s/^\([[:space:]]*pp[[:space:]]*=.*\)/\1\n    sequence_parallel = $sp/" "$@" "$here/$base.tp" >"$plans/$name.tp"
}

# pipeline BASE NAME [SED...]: BASE over 2 pipeline stages, 4 micro-batches of 2.
pipeline() {
    local base=$1 name=$2
    shift 2
    sed -e 's/gpus_per_node = 1/gpus_per_node = 2/' -e 's/^\([[:space:]]*pp[[:space:]]*=[[:space:]]*\)1/\12/' \
        -e 's/micro_batch = 8/micro_batch = 2/' "$@" "$here/$base.tp" >"$plans/$name.tp"
}

run() { # NAME PLAN [ARGS...]: planc run for 20 steps into OUTDIR/NAME
    local name=$1 plan=$2
    shift 2
    mkdir -p "$out/$name"
    local t0=$SECONDS rc=0
    "$PLANC" run "$plan" --steps 20 --metrics "$out/$name/m.jsonl" "$@" >"$out/$name/log" 2>&1 || rc=$?
    # The whole command, start and teardown included (the `start` line covers the start).
    echo "wall     $((SECONDS - t0)) s for the whole command" >>"$out/$name/log"
    return $rc
}

compare() { # NAME BASE TOL
    if "$PY" "$ref" same-losses "$out/$2/m.jsonl" "$out/$1/m.jsonl" --first 1 --last 20 --tol "$3" >"$out/$1/cmp" 2>&1; then
        record "$1" "ok ($(tail -n 1 "$out/$1/cmp")) $(grep -m 1 '^wall' "$out/$1/log"); $(grep -m 1 '^start' "$out/$1/log")"
    else
        record "$1" "FAIL ($(tail -n 3 "$out/$1/cmp" | tr '\n' ' '))"
    fi
}

# BASES narrows a run to some of the plans (a short device budget); the default is all four.
bases=${BASES:-gpt-fp32 llama-fp32 gpt-bf16 llama-bf16}
# PARTS picks and orders the parts (default: all, in this order); with little device time,
# `PARTS="faults nodes layouts"` puts the fault checks first. Parts: layouts (dp, tp, pp
# against one GPU), flash (flash + full recompute under tp 2), resume (tp/pp checkpoints on
# one GPU), nodes (two node processes), faults (killed rank, stalled rank).
parts=${PARTS:-layouts flash resume nodes faults}

# one_gpu_base BASE: the one-GPU run the others are compared with, once.
one_gpu_base() {
    [ -f "$out/$1/m.jsonl" ] && return 0
    cp "$here/$1.tp" "$plans/$1.tp"
    run "$1" "$plans/$1.tp"
}

part_layouts() {
    for base in $bases; do
        tol=1e-4
        [[ $base == *bf16 ]] && tol=2e-2
        one_gpu_base "$base" || { record "$base" "FAIL (one GPU: $(tail -n 2 "$out/$base/log"))"; continue; }
        for z in 0 1; do
            two_gpus "$base" "$base-dp2-zero$z" "$z"
            if run "$base-dp2-zero$z" "$plans/$base-dp2-zero$z.tp"; then
                compare "$base-dp2-zero$z" "$base" "$tol"
            else
                record "$base-dp2-zero$z" "FAIL ($(tail -n 3 "$out/$base-dp2-zero$z/log" | tr '\n' ' '))"
            fi
        done
        for sp in false true; do
            tensor_parallel "$base" "$base-tp2-sp$sp" "$sp"
            if run "$base-tp2-sp$sp" "$plans/$base-tp2-sp$sp.tp"; then
                compare "$base-tp2-sp$sp" "$base" "$tol"
            else
                record "$base-tp2-sp$sp" "FAIL ($(tail -n 3 "$out/$base-tp2-sp$sp/log" | tr '\n' ' '))"
            fi
        done
        pipeline "$base" "$base-pp2-1f1b" -e 's/^\([[:space:]]*pp[[:space:]]*=.*\)/\1\n    schedule = 1f1b/'
        pipeline "$base" "$base-pp2-gpipe" -e 's/^\([[:space:]]*pp[[:space:]]*=.*\)/\1\n    schedule = gpipe/'
        pipeline "$base" "$base-pp2-interleaved" -e 's/^\([[:space:]]*pp[[:space:]]*=.*\)/\1\n    schedule = interleaved\n    vpp = 2/'
        for v in 1f1b gpipe interleaved; do
            if run "$base-pp2-$v" "$plans/$base-pp2-$v.tp"; then
                compare "$base-pp2-$v" "$base" "$tol"
            else
                record "$base-pp2-$v" "FAIL ($(tail -n 3 "$out/$base-pp2-$v/log" | tr '\n' ' '))"
            fi
        done
    done
}

part_flash() {
    # tp 2 with sequence parallelism, flash attention and full recompute, against one GPU
    # with the same attention and recompute.
    for base in gpt-bf16 llama-bf16; do
        case " $bases " in *" $base "*) ;; *) continue ;; esac
        edits=(-e 's/attention = standard/attention = flash/' -e 's/recompute = none/recompute = full/')
        sed "${edits[@]}" "$here/$base.tp" >"$plans/$base-flash-full.tp"
        run "$base-flash-full" "$plans/$base-flash-full.tp" || { record "$base-flash-full" "FAIL (one GPU)"; continue; }
        tensor_parallel "$base" "$base-flash-full-tp2" true "${edits[@]}"
        if run "$base-flash-full-tp2" "$plans/$base-flash-full-tp2.tp"; then
            compare "$base-flash-full-tp2" "$base-flash-full" 2e-2
        else
            record "$base-flash-full-tp2" "FAIL ($(tail -n 3 "$out/$base-flash-full-tp2/log" | tr '\n' ' '))"
        fi
    done
}

part_resume() {
    # Checkpoints written under tp 2 and pp 2 (one Hugging Face model whatever the layout)
    # resumed on one GPU: steps 8-20 as the one-GPU run's.
    for layout in llama-fp32-tp2-sptrue gpt-fp32-pp2-1f1b gpt-fp32-tp2-sptrue; do
        base=${layout%%-tp2*}
        base=${base%%-pp2*}
        [ -f "$plans/$layout.tp" ] || continue
        one_gpu_base "$base" || continue
        name=$layout-resume-1gpu
        mkdir -p "$out/$name"
        rm -rf "$out/$name/ck"
        "$PLANC" run "$plans/$layout.tp" --steps 7 --save "$out/$name/ck" >"$out/$name/log" 2>&1 &&
            "$PLANC" run "$plans/$base.tp" --steps 13 --resume "$out/$name/ck" --metrics "$out/$name/m.jsonl" >>"$out/$name/log" 2>&1
        if "$PY" "$ref" same-losses "$out/$base/m.jsonl" "$out/$name/m.jsonl" --first 8 --last 20 --tol 1e-4 >"$out/$name/cmp" 2>&1; then
            record "$name" "ok ($(tail -n 1 "$out/$name/cmp"))"
        else
            record "$name" "FAIL ($(tail -n 3 "$out/$name/cmp" "$out/$name/log" | tr '\n' ' '))"
        fi
    done
}

part_nodes() {
    [ -f "$plans/gpt-fp32-dp2-zero0.tp" ] || two_gpus gpt-fp32 gpt-fp32-dp2-zero0 0
    one_gpu_base gpt-fp32 || { record gpt-fp32-2nodes "FAIL (one GPU)"; return; }
    # Two node processes, one GPU each, meeting over loopback.
    name=gpt-fp32-2nodes
    mkdir -p "$out/$name"
    port=$((20000 + RANDOM % 20000))
    CUDA_VISIBLE_DEVICES=1 "$PLANC" run "$plans/gpt-fp32-dp2-zero0.tp" --steps 20 --nnodes 2 --node-rank 1 \
        --master 127.0.0.1:$port >"$out/$name/log1" 2>&1 &
    CUDA_VISIBLE_DEVICES=0 "$PLANC" run "$plans/gpt-fp32-dp2-zero0.tp" --steps 20 --nnodes 2 --node-rank 0 \
        --master 127.0.0.1:$port --metrics "$out/$name/m.jsonl" >"$out/$name/log" 2>&1
    wait
    compare "$name" gpt-fp32 1e-4

    # The same, node 1 with other --steps: its program differs (it would hang in the
    # last step's collectives); the rendezvous refuses it on both nodes, naming both.
    name=mismatched-nodes
    mkdir -p "$out/$name"
    port=$((20000 + RANDOM % 20000))
    start=$(date +%s)
    PLANC_TIMEOUT_S=30 CUDA_VISIBLE_DEVICES=1 timeout 60 "$PLANC" run "$plans/gpt-fp32-dp2-zero0.tp" --steps 19 \
        --nnodes 2 --node-rank 1 --master 127.0.0.1:$port >"$out/$name/log1" 2>&1 &
    PLANC_TIMEOUT_S=30 CUDA_VISIBLE_DEVICES=0 timeout 60 "$PLANC" run "$plans/gpt-fp32-dp2-zero0.tp" --steps 20 \
        --nnodes 2 --node-rank 0 --master 127.0.0.1:$port >"$out/$name/log" 2>&1
    code=$?
    wait
    if [ "$code" = 1 ] && grep -q "rank 1 runs .* 19 steps.*rank 0 runs .* 20 steps" "$out/$name/log"; then
        record "$name" "ok (exit 1 after $(( $(date +%s) - start )) s: $(grep -m 1 'rank 1 runs' "$out/$name/log" | cut -c1-200))"
    else
        record "$name" "FAIL (exit $code: $(tail -n 3 "$out/$name/log" | tr '\n' ' '))"
    fi
}

part_faults() {
    [ -f "$plans/gpt-fp32-dp2-zero0.tp" ] || two_gpus gpt-fp32 gpt-fp32-dp2-zero0 0
    # A rank killed mid-run: the launcher names it and stops the other; nothing is left.
    name=killed-rank
    mkdir -p "$out/$name"
    start=$(date +%s)
    "$PLANC" run "$plans/gpt-fp32-dp2-zero0.tp" --steps 100000 >"$out/$name/log" 2>&1 &
    launcher=$!
    # Killed mid-step, not while the ranks start (a start can take half a minute).
    for _ in $(seq 1 240); do
        grep -q '^step' "$out/$name/log" && break
        sleep 0.5
    done
    sleep 1
    victim=$(grep -l 'PLANC_RANK=1' /proc/[0-9]*/environ 2>/dev/null | head -n 1 | cut -d/ -f3)
    [ -n "$victim" ] && kill -9 "$victim"
    wait $launcher
    code=$?
    sleep 1
    left=$(grep -l 'PLANC_RANK=' /proc/[0-9]*/environ 2>/dev/null | wc -l)
    if [ "$code" = 1 ] && grep -q "rank 1 .*killed by signal 9" "$out/$name/log" && [ "$left" = 0 ]; then
        record "$name" "ok (exit 1 after $(( $(date +%s) - start )) s: $(grep 'rank 1' "$out/$name/log" | head -n 1))"
    else
        record "$name" "FAIL (exit $code, $left processes left: $(tail -n 3 "$out/$name/log" | tr '\n' ' '))"
    fi

    # A planted stall: rank 1 stops taking part before step 3's loss reduction; the watchdog
    # must name the wait and end the run within the timeout.
    name=stalled-rank
    mkdir -p "$out/$name"
    start=$(date +%s)
    PLANC_TIMEOUT_S=20 PLANC_FAULT=stall:1:3 timeout 120 "$PLANC" run "$plans/gpt-fp32-dp2-zero0.tp" --steps 20 >"$out/$name/log" 2>&1
    code=$?
    left=$(grep -l 'PLANC_RANK=' /proc/[0-9]*/environ 2>/dev/null | wc -l)
    # Whichever watchdog fires first names it: rank 0's (it waited in the loss reduction)
    # or rank 1's own (it has been in step 3 past the limit); both clocks start within
    # milliseconds of each other.
    named='waited .* in the step-|has been in step 3 for'
    if [ "$code" = 1 ] && grep -Eq "$named" "$out/$name/log" && [ "$left" = 0 ]; then
        record "$name" "ok (exit 1 after $(( $(date +%s) - start )) s: $(grep -Em 1 "$named" "$out/$name/log"))"
    else
        record "$name" "FAIL (exit $code after $(( $(date +%s) - start )) s, $left left: $(tail -n 4 "$out/$name/log" | tr '\n' ' '))"
    fi
    # The host waits at a sync point; the trail says where its GPU is.
    if grep -q "its GPU " "$out/$name/log"; then
        record "$name-trail" "ok ($(grep -o 'its GPU .*' "$out/$name/log" | head -n 1))"
    else
        record "$name-trail" "FAIL (no operation named: $(grep -E "$named" "$out/$name/log" | head -n 1))"
    fi
}

for part in $parts; do
    "part_$part"
done

printf '%s\n' "${results[@]}"
! printf '%s\n' "${results[@]}" | grep -q FAIL
