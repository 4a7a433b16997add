#!/usr/bin/env bash
# fp8.sh: issue 26's fp8 training on a lent GPU (Ada or Hopper), from the bundle
# bundle.sh builds (.dev/):
#
#   runtime/tests/gpu/fp8.sh OUTDIR
#
# - `kernels`: the fp8 test binary (casts bit for bit, a linear layer against float64,
#   the delayed scales, an fp8 product's speed beside bf16).
# - `speed`: the GPT 6.6B plan (plans/gpt6.6b.tp) at global batch 8 in bf16 and in fp8,
#   each run's median step (issue 26: fp8 at least 1.3x faster) and its prediction.
# - `loss`: GPT-2 small on bytes (plans/gpt2-bytes.tp, vocab 256) of this machine's Python
#   standard library sources, 300 steps in bf16 and in fp8 of the same plan; the mean loss
#   of the last 20 steps of each and their relative difference (issue 26: within 1 %).
#
# PARTS picks the parts (default "kernels speed loss"); STEPS the speed runs' steps
# (default 8), LOSS_STEPS the loss runs' (default 300); LAYERS=K runs the 6.6B plan's
# first K layers (`--layers`) in both precisions, should its fp8 run not fit the GPU.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out/plans"
parts=" ${PARTS:-kernels speed loss} "
want() { [[ "$parts" == *" $1 "* ]]; }
. "$here/env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
# Median step (seconds) of a run's metrics past its first two steps, and its mean loss over
# the last N steps.
stat() {
    python3 - "$@" <<'EOF'
import json, statistics, sys
what, path = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(path) if l.strip()]
rows = [r for r in rows if "step_s" in r]
if what == "step":
    print(statistics.median(r["step_s"] for r in rows[2:] or rows))
else:
    n = int(sys.argv[3])
    print(sum(r["loss"] for r in rows[-n:]) / len(rows[-n:]))
EOF
}
# One run: NAME PLAN [planc run args...]; its metrics in $out/NAME.jsonl.
run() {
    local name=$1 plan=$2
    shift 2
    rm -f "$out/$name.jsonl"
    "$planc" run "$plan" --color never --metrics "$out/$name.jsonl" "$@" >"$out/run-$name.log" 2>&1
    local rc=$?
    echo "-- $name: exit $rc"
    grep -E "^(error|warning|note)" "$out/run-$name.log" | head -n 5
    sed -n '/^time/p;/^memory/p;/^speed/p' "$out/run-$name.log"
    return $rc
}
if want kernels; then
    echo "== fp8 kernel tests"
    "$root/.dev/tests/fp8" --nocapture --test-threads 1 2>&1 |
        grep -E "^test |SKIPPED|panicked|fp8 linear|TFLOP|FAIL|test result" | tee "$out/fp8-tests.log"
fi
if want speed; then
    echo "== GPT 6.6B, global batch 8: bf16 and fp8"
    steps=${STEPS:-8}
    for p in bf16 fp8; do
        run "gpt6.6b-$p" "$here/plans/gpt6.6b.tp" --steps "$steps" ${LAYERS:+--layers "$LAYERS"} \
            --set train.global_batch=8 --set train.precision=$p
    done
    if [ -s "$out/gpt6.6b-bf16.jsonl" ] && [ -s "$out/gpt6.6b-fp8.jsonl" ]; then
        b=$(stat step "$out/gpt6.6b-bf16.jsonl")
        f=$(stat step "$out/gpt6.6b-fp8.jsonl")
        python3 -c "b, f = $b, $f; print(f'6.6B step: bf16 {b*1e3:.1f} ms, fp8 {f*1e3:.1f} ms, fp8 {b/f:.3f}x faster (target >= 1.3x)')"
    fi
fi
if want loss; then
    echo "== GPT-2 small on the Python standard library's bytes: bf16 and fp8"
    data=$out/plans/stdlib.bin
    python3 - "$data" <<'EOF'
import pathlib, sys, sysconfig
lib = pathlib.Path(sysconfig.get_paths()["stdlib"])
text = b"".join(p.read_bytes() for p in sorted(lib.rglob("*.py")) if "site-packages" not in p.parts)
# One token a byte, u16 little-endian (the token file's layout): each byte, then a zero.
tokens = bytearray(2 * len(text))
tokens[0::2] = text
pathlib.Path(sys.argv[1]).write_bytes(bytes(tokens))
print(f"{len(text)/1e6:.1f} MB of Python sources from {lib}")
EOF
    cp "$here/plans/gpt2-bytes.tp" "$out/plans/"
    steps=${LOSS_STEPS:-300}
    for p in bf16 fp8; do
        run "bytes-$p" "$out/plans/gpt2-bytes.tp" --steps "$steps" --set train.precision=$p
    done
    if [ -s "$out/bytes-bf16.jsonl" ] && [ -s "$out/bytes-fp8.jsonl" ]; then
        b=$(stat loss "$out/bytes-bf16.jsonl" 20)
        f=$(stat loss "$out/bytes-fp8.jsonl" 20)
        python3 -c "b, f = $b, $f; print(f'last-20-step mean loss: bf16 {b:.4f}, fp8 {f:.4f}, fp8 {100*(f-b)/b:+.2f} % (target within 1 %)')"
        python3 - "$out/bytes-bf16.jsonl" "$out/bytes-fp8.jsonl" <<'EOF'
import json, sys
a, b = ([json.loads(l) for l in open(p) if l.strip()] for p in sys.argv[1:3])
print("step   bf16 loss  fp8 loss")
for x, y in zip(a, b):
    if x["step"] in (1, 2, 5, 10, 25, 50) or x["step"] % 50 == 0:
        print(f'{x["step"]:5d}  {x["loss"]:9.4f}  {y["loss"]:8.4f}')
EOF
    fi
fi
