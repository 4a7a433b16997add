#!/usr/bin/env bash
# fp8_layouts.sh: `precision = fp8` over each layout, a few steps each, to find which one
# fails (Llama 3.2 1B at tp 2 + sp gave a NaN loss at step 1 on 2026-11-28, one GPU did not):
#
#   runtime/tests/gpu/fp8_layouts.sh OUTDIR      # on a 2-GPU machine
#
# Each run prints its first losses, or the end of its log when it fails.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
[ -f "$root/.dev/lib/libz3.so.4.gz" ] && [ ! -f "$root/.dev/lib/libz3.so.4" ] && gunzip -k "$root/.dev/lib/libz3.so.4.gz"
. "$here/env.sh"
llama=$root/examples/llama3.2-1b-2gpu-tp2.tp
python3 "$here/reference.py" make-data "$out/tokens.bin" --vocab 4096 --tokens 30011 --seed 1 >/dev/null
fp8() { sed -e 's/precision = bf16/precision = fp8/' "$@"; }
fp8 "$llama" >"$out/tp2-sp.tp"
fp8 -e 's/sequence_parallel = true/sequence_parallel = false/' "$llama" >"$out/tp2-nosp.tp"
fp8 -e 's/tp = 2/tp = 1/' -e 's/sequence_parallel = true/sequence_parallel = false/' -e 's/dp = 1/dp = 2/' "$llama" >"$out/dp2.tp"
fp8 -e 's/tp = 2/tp = 1/' -e 's/sequence_parallel = true/sequence_parallel = false/' \
    -e 's/^\([[:space:]]*\)pp = 1/\1pp = 2/' -e 's/micro_batch = 4.*/micro_batch = 2/' "$llama" >"$out/pp2.tp"
fp8 -e 's/gpus_per_node = 2/gpus_per_node = 1/' -e 's/tp = 2/tp = 1/' -e 's/sequence_parallel = true/sequence_parallel = false/' "$llama" >"$out/1gpu.tp"
# The layouts' small GPT (256 wide), over tp 2 and alone.
fp8 -e 's/gpus_per_node = 1/gpus_per_node = 2/' -e 's/^\([[:space:]]*tp[[:space:]]*=[[:space:]]*\)1/\12/' "$here/gpt-bf16.tp" >"$out/gpt-tp2.tp"
fp8 "$here/gpt-bf16.tp" >"$out/gpt-1gpu.tp"
for r in ${RUNS:-tp2-sp tp2-nosp dp2 pp2 1gpu gpt-tp2 gpt-1gpu}; do
    extra=()
    [[ $r == 1gpu ]] && extra=(--no-graphs)
    (cd "$out" && timeout 60 "$planc" run "$r.tp" --steps 4 --metrics "$r.jsonl" --color never "${extra[@]}" >"$r.log" 2>&1)
    rc=$?
    losses=$(grep -o '"loss":[^,]*' "$out/$r.jsonl" 2>/dev/null | cut -d: -f2 | tr '\n' ' ')
    echo "$r: exit $rc, losses ${losses:-none} $(grep -m 1 'fp8 runs' "$out/$r.log" | cut -c1-120)"
    [ $rc -ne 0 ] && grep -E '^error' "$out/$r.log" | head -n 2 | cut -c1-300
done
