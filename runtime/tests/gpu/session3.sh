#!/usr/bin/env bash
# session3.sh: one call on a lent H200 for issues 26 and 27 after the profile was re-shipped:
# the unseen plans and the speed plans priced from the shipped profile (as a user who never
# calibrates gets), the SM clock and power sampled through each run (clocks.py), one layer's
# operations timed alone (`planc run --ops`) beside the same layer in training, PyTorch's
# side of the speed comparison and the attention against SDPA.
#
#   runtime/tests/gpu/session3.sh OUTDIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out"
. "$here/env.sh"
parts=" ${PARTS:-plans speed ops torch attention} "
want() { [[ "$parts" == *" $1 "* ]]; }
python3 "$here/clocks.py" sample "$out/clocks.csv" &
sampler=$!
export MARKS=$out/marks.txt
: >"$MARKS"
want plans && PARTS="plans" "$here/unseen.sh" "$out/u"
want speed && PARTS="speed" "$here/unseen.sh" "$out/u"
if want ops; then
    echo "== one layer's operations alone: llama3-8b-8layers"
    "$planc" run "$here/plans/llama3-8b-8layers.tp" --ops --color never >"$out/ops-llama8b.log" 2>&1
    sed -n '/operation/,$p' "$out/ops-llama8b.log" | head -n 40
fi
if want torch; then
    echo "start torch $(date +%s.%N)" >>"$MARKS"
    PARTS="torch" "$here/unseen.sh" "$out/u"
    echo "end torch $(date +%s.%N)" >>"$MARKS"
fi
if want attention; then
    PARTS="speed" timeout 150 "$here/attention_cudnn.sh" "$out/attn" 2>&1 | tail -n 40
fi
kill $sampler 2>/dev/null
echo "== clocks through each run (second half, busy samples)"
python3 "$here/clocks.py" report "$out/clocks.csv" "$MARKS"
