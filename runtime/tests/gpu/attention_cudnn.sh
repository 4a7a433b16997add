#!/usr/bin/env bash
# attention_cudnn.sh: cuDNN's fused attention in `planc run` (runtime/src/device/attention_cudnn)
# on a lent GPU, in one call. Build first on the build machine (no Rust on the GPU one):
#
#   runtime/tests/gpu/bundle.sh                   # .dev/: planc and the GPU test binaries
#   runtime/tests/gpu/attention_cudnn.sh OUTDIR   # on the GPU machine, carrying .dev
#
# Parts (PARTS picks some; default all, about 6 minutes on an H200):
#   env          the GPU, PyTorch's CUDA and cuDNN, the libcudnn planc opens
#   correctness  cuDNN's plans against PyTorch autograd in float64 (attention_cudnn test:
#                causal forward + logsumexp + backward, MHA and GQA, head sizes 32/64/128,
#                bf16 and fp16, gradients into head buffers and into the merged qkv
#                gradient, the deterministic backward bit-identical over two runs)
#   speed        TFLOP/s at 4x4096, 32 heads of 128 (and the example models' shapes): planc's
#                cuDNN path (deterministic and not) and its own tensor-core kernels, beside
#                PyTorch SDPA's flash and cuDNN backends (attention_sdpa.py), one table
#   numerics     numerics.sh's bf16 GPT and Llama plans (GQA, rope) with flash attention on
#                cuDNN against the PyTorch replay, and their standard-attention bases
#   run          `planc run` of the GPT-2 and Llama 3.2 1B examples with flash attention,
#                cuDNN (required) against planc's kernels (off): losses and tokens/s
#
# Every part runs whatever failed before it; the table at the end says which failed, and
# the exit status is 1 if any did. A failure prints what is needed to fix it without
# another run: the graphs cuDNN was given, the engines heuristics proposed and why each
# was refused, cuDNN's own error log (CUDNN_LOGLEVEL_DBG=2), the tails of the logs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-${OUT:-$root/.dev/attention_cudnn}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
parts=" ${PARTS:-env correctness speed numerics run} "
want() { [[ "$parts" == *" $1 "* ]]; }
. "$here/env.sh"
cd "$root"  # the test binaries find gpu/autograd.py from the repository root
bin=$root/.dev/tests/attention_cudnn
names=() results=()
record() { names+=("$1"); results+=("$2"); echo "== $1: $2"; }
started=$SECONDS
lap() { echo "   ($(( SECONDS - started )) s so far)"; }

for f in "$bin" "$planc"; do
    if [ ! -x "$f" ]; then
        echo "missing $f: run runtime/tests/gpu/bundle.sh on the build machine and carry .dev" >&2
        exit 2
    fi
done

if want env; then
    echo "== env"
    nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.max.sm --format=csv,noheader || true
    python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())' || true
    ls "$S/nvidia/cudnn/lib" 2>/dev/null | tr '\n' ' ' || echo "no $S/nvidia/cudnn/lib"
    echo
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "PLANC_CUDNN=${PLANC_CUDNN:-} (unset: libcudnn.so.9, then libcudnn.so, from the loader's path)"
fi

if want correctness; then
    echo "== correctness: cuDNN's plans against PyTorch autograd (float64)"
    log=$out/correctness.log dbg=$out/cudnn-debug.log
    rm -f "$dbg"
    if PLANC_CUDNN_ATTENTION=require CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$dbg" \
        "$bin" cudnn_attention_matches --nocapture --test-threads=1 >"$log" 2>&1; then
        grep -E "^(cuDNN|ok |note |FAIL)|max rel error|: cuDNN" "$log" || true
        record correctness ok
    else
        grep -E "^(cuDNN|ok |note |FAIL|SKIPPED)|max rel error|: cuDNN|panicked|refused" "$log" || true
        echo "-- tail of $log (graphs, engines tried, errors):"
        tail -n 80 "$log"
        if [ -s "$dbg" ]; then
            echo "-- cuDNN's log, last errors and warnings ($dbg):"
            grep -iE "error|warn|not supported|fail" "$dbg" | tail -n 40 || tail -n 40 "$dbg"
        fi
        record correctness FAIL
    fi
    lap
fi

if want speed; then
    echo "== speed: TFLOP/s, causal, bf16 (the causal half; backward as 2.5 x forward)"
    log=$out/speed-planc.log
    if PLANC_ATTENTION_SPEED=1 PLANC_CUDNN_ATTENTION=require \
        "$bin" speed --nocapture --test-threads=1 >"$log" 2>&1; then
        grep -E "^speed|refused" "$log" || true
        if python3 "$here/attention_sdpa.py" --planc "$log" >"$out/speed-torch.log" 2>&1; then
            sed -n '/^torch/p;/^speed/p;/^forward/,$p' "$out/speed-torch.log"
            if grep -q "at least FA2" "$out/speed-torch.log"; then
                record speed ok
            else
                record speed "BELOW FA2 (or a row missing; see above)"
            fi
        else
            tail -n 30 "$out/speed-torch.log"
            record speed "FAIL (attention_sdpa.py)"
        fi
    else
        tail -n 60 "$log"
        record speed FAIL
    fi
    lap
fi

if want numerics; then
    echo "== numerics: bf16 GPT and Llama (GQA, rope), flash on cuDNN, against the PyTorch replay"
    if PLANC_CUDNN_ATTENTION=require CASES="gpt-bf16 llama-bf16" VARIANTS="flash" PLANC=$planc \
        "$here/numerics.sh" "$out/numerics" >"$out/numerics.log" 2>&1; then
        tail -n 6 "$out/numerics.log"
        record numerics ok
    else
        tail -n 40 "$out/numerics.log"
        record numerics FAIL
    fi
    lap
fi

# run_pair EXAMPLE: the example with flash attention, 20 steps, cuDNN required and off.
run_pair() {
    local ex=$1 f=$out/plans/$1-flash.tp rc=0
    mkdir -p "$out/plans"
    sed -e "s/attention = [a-z]*/attention = flash/" "$root/examples/$ex.tp" >"$f"
    for mode in require off; do
        rm -f "$out/$ex-$mode.jsonl"
        echo "-- planc run $ex (flash, PLANC_CUDNN_ATTENTION=$mode)"
        if PLANC_CUDNN_ATTENTION=$mode "$planc" run "$f" --steps 20 --color never \
            --metrics "$out/$ex-$mode.jsonl" >"$out/run-$ex-$mode.log" 2>&1; then
            sed -n '/^note/p;/^time/p;/^memory/p;/^speed/p;/^by kind/,$p' "$out/run-$ex-$mode.log"
        else
            tail -n 30 "$out/run-$ex-$mode.log"
            rc=1
        fi
    done
    [ $rc -eq 0 ] || return 1
    # Same seed, same data: the losses differ only by the attention's rounding.
    python3 - "$out/$ex-require.jsonl" "$out/$ex-off.jsonl" <<'EOF'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if l.strip()] for p in sys.argv[1:])
d = [abs(x - y) / abs(y) for x, y in zip(a, b)]
print(f"   losses cuDNN {a[0]:.4f} .. {a[-1]:.4f}, planc's kernels {b[0]:.4f} .. {b[-1]:.4f}; "
      f"max relative difference {max(d):.2e} (step 1: {d[0]:.2e})")
sys.exit(0 if d[0] < 1e-2 and max(d) < 5e-2 else 1)
EOF
}

if want run; then
    echo "== planc run: cuDNN against planc's kernels"
    for ex in gpt2-124m-1gpu llama3.2-1b-1gpu; do
        if run_pair "$ex"; then record "run $ex" ok; else record "run $ex" FAIL; fi
    done
    lap
fi

echo
printf '%-26s %s\n' part result
failed=0
for i in "${!names[@]}"; do
    printf '%-26s %s\n' "${names[$i]}" "${results[$i]}"
    [ "${results[$i]}" = ok ] || failed=$((failed + 1))
done
echo "$(( ${#names[@]} - failed )) passed, $failed failed ($(( SECONDS - started )) s; logs in $out)"
[ $failed -eq 0 ]
