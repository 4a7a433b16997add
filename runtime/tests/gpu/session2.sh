#!/usr/bin/env bash
# session2.sh: a lent two-GPU machine's whole visit in one `device` call, most important
# first (issue 29's order), each part under its own limit inside one overall budget, so a
# slow part leaves the later ones their time and what ran comes back even when the call is
# cut short. From the bundle (`bundle.sh`, carry .dev) and, for Megatron-LM, .fw:
#
#   BUDGET_S=400 runtime/tests/gpu/session2.sh $OUT
#
# Parts: layouts (faults, node processes, every layout against one GPU, resumes, flash),
# frameworks (the torchrun target's DDP and FSDP2 at dp 2, Megatron-LM at dp 2, tp 2, pp 2),
# speed (planc's GPT-2 dp 2, Llama 1B tp 2 and pp 2 against the prediction; PyTorch DDP),
# attention (cuDNN's fused attention on one GPU), calibrate (`planc calibrate --gpus 2`).
# SESSION_PARTS picks and orders them.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
deadline=$((SECONDS + ${BUDGET_S:-400}))
[ -f "$root/.dev/lib/libz3.so.4.gz" ] && [ ! -f "$root/.dev/lib/libz3.so.4" ] && gunzip -k "$root/.dev/lib/libz3.so.4.gz"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader

# gpus_free: ends every process still on a GPU (a framework's workers outlive their
# launcher when it is ended at a limit, and held 25 GiB of each GPU into the next part on
# 2026-11-27) and waits until the GPUs are empty, so no part measures beside another's.
gpus_free() {
    local pids
    for _ in $(seq 1 30); do
        pids=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ')
        [ -z "$pids" ] && return 0
        echo "   ending GPU processes left running: $(echo $pids)"
        kill -9 $pids 2>/dev/null
        sleep 1
    done
    echo "   GPU processes still there after 30 s: $(echo $pids)"
}

# part NAME LIMIT COMMAND...: COMMAND in its own process group, ended (group and all) after
# LIMIT seconds or at the overall deadline, whichever is first; its output into OUTDIR/NAME.txt.
part() {
    local name=$1 limit=$2 left=$((deadline - SECONDS))
    shift 2
    if [ "$left" -lt 20 ]; then
        echo "== $name: not run (${left} s left of the budget)"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (limit $limit s)"
    local t0=$SECONDS
    setsid "$@" >"$out/$name.txt" 2>&1 &
    local pid=$!
    (sleep "$limit"; kill -TERM -- -"$pid" 2>/dev/null; sleep 5; kill -KILL -- -"$pid" 2>/dev/null) &
    local watcher=$!
    wait "$pid"
    local rc=$?
    kill "$watcher" 2>/dev/null
    wait "$watcher" 2>/dev/null
    echo "== $name: exit $rc after $((SECONDS - t0)) s"
    gpus_free
    tail -n "${TAIL:-45}" "$out/$name.txt"
}

for p in ${SESSION_PARTS:-layouts frameworks speed attention calibrate}; do
    case $p in
        layouts) part layouts 170 env PARTS="faults nodes layouts resume flash" bash "$here/layouts.sh" "$out/layouts" ;;
        frameworks) part frameworks 170 env PARTS="torchrun2 megatron2" RUN_LIMIT=120 bash "$root/tests/frameworks/run.sh" "$out/frameworks" ;;
        speed) part speed 100 env PARTS="speed torch" bash "$here/two_gpu.sh" "$out/speed" ;;
        attention) part attention 90 env PARTS="env correctness run" bash "$here/attention_cudnn.sh" "$out/attention" ;;
        calibrate) part calibrate 200 bash -c ". '$here/env.sh'; \"\$planc\" calibrate --gpus 2 -o '$out/profile-2gpu.toml' 2>&1 | tr '\r' '\n' | tail -n 80" ;;
        *) echo "== $p: no such part" ;;
    esac
done
