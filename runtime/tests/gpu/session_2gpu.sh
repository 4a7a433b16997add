#!/usr/bin/env bash
# session_2gpu.sh: one call on a lent 2-GPU machine for planc's own runtime after its rebuild
# (issue 29's first half), each part under its own time limit so one that hangs costs only
# its share of the call:
#
#   runtime/tests/gpu/session_2gpu.sh OUTDIR
#
# Parts (PARTS picks and orders them; default all):
# - layouts: layouts.sh, every layout against one GPU, node processes, a killed and a stalled rank;
# - two: two_gpu.sh, `planc calibrate --gpus 2`, the three two-GPU plans against their
#   prediction, PyTorch DDP beside GPT-2 dp 2;
# - fp8: Llama 3.2 1B at tp 2 + sp in fp8 beside the same plan in bf16, and in fp8 on one
#   GPU (30 steps, synthetic tokens): losses and step time of each.
# Logs land in OUTDIR/logs.tgz (a call brings back a few files only).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
[ -f "$root/.dev/lib/libz3.so.4.gz" ] && [ ! -f "$root/.dev/lib/libz3.so.4" ] && gunzip -k "$root/.dev/lib/libz3.so.4.gz"
. "$here/env.sh"
parts=${PARTS:-layouts two fp8}
work=/tmp/s2
mkdir -p "$work"
nvidia-smi --query-gpu=index,name,clocks.max.sm,power.limit --format=csv,noheader
nvidia-smi topo -m 2>/dev/null | head -n 4
for part in $parts; do
    t0=$SECONDS
    case $part in
    layouts)
        echo "== layouts.sh"
        timeout "${LAYOUTS_S:-260}" "$here/layouts.sh" "$work/layouts" >"$work/layouts.log" 2>&1
        echo "exit $? after $((SECONDS - t0)) s"
        grep -E '^[a-z0-9-]+: (ok|FAIL)' "$work/layouts.log" | cut -c1-260
        ;;
    two)
        echo "== two_gpu.sh"
        timeout "${TWO_S:-280}" "$here/two_gpu.sh" "$work/two" >"$work/two.log" 2>&1
        echo "exit $? after $((SECONDS - t0)) s"
        grep -vE '^\s*$' "$work/two.log" | grep -vE '^(products|kernels|collective)' | tail -n 80
        cp "$work/two/profile.toml" "$out/profile-2gpu.toml" 2>/dev/null
        ;;
    fp8)
        # Llama 3.2 1B in fp8 on one GPU and at tp 2 + sp, beside bf16 at tp 2 (FP8_RUNS
        # narrows them): losses, step time, and the log's end where a run fails.
        echo "== fp8"
        mkdir -p "$work/fp8"
        for r in ${FP8_RUNS:-tp2-bf16 tp2-fp8 1gpu-fp8}; do
            prec=${r#*-}
            base=$root/examples/llama3.2-1b-2gpu-tp2.tp
            [[ $r == 1gpu* ]] && base=$root/examples/llama3.2-1b-1gpu.tp
            f=$work/fp8/$r.tp
            sed -e "s/precision = bf16/precision = $prec/" "$base" >"$f"
            [ -f "$work/two/profile.toml" ] &&
                sed -i "s#^\(cluster [a-z0-9_]* {\)#\1\n    profile = \"$work/two/profile.toml\"#" "$f"
            timeout "${FP8_S:-60}" "$planc" run "$f" --steps "${FP8_STEPS:-30}" --metrics "$work/fp8/$r.jsonl" \
                --color never >"$work/fp8/$r.log" 2>&1
            rc=$?
            echo "$r: exit $rc"
            sed -n '/^time/p;/^speed/p;/fp8/p' "$work/fp8/$r.log" | head -n 6
            [ $rc -ne 0 ] && grep -v '^start' "$work/fp8/$r.log" | tail -n 14
            python3 -c 'import json,sys
l=[json.loads(x).get("loss") for x in open(sys.argv[1]) if x.startswith("{")]
f=lambda v: "%.4f" % v if isinstance(v, float) else str(v)
print("loss", " ".join(map(f, l[:4])), "...", " ".join(map(f, l[-3:])))' "$work/fp8/$r.jsonl" 2>&1 | tail -n 1
        done
        ;;
    esac
done
# Logs only (the layouts' metrics and checkpoints would exceed what a call brings back).
tar -czf "$out/logs.tgz" -C "$work" --exclude="*.bin" --exclude="ck" --exclude="*.safetensors" --exclude="*.json" . 2>/dev/null
