#!/usr/bin/env bash
# run.sh: the real frameworks trained from planc's emitted artifacts on a lent GPU machine,
# each beside `planc check`'s prediction for the same plan and framework, in one call of the
# `device` tool. What travels (carry): .dev (runtime/tests/gpu/bundle.sh: the stripped planc
# and libz3, gzipped or not), .whl (DeepSpeed 0.19.8 built with `pip wheel --no-deps`, torchtitan
# and the dependencies the machine lacks), .fw/megatron-lm.tar.gz (Megatron-LM's megatron/,
# pretrain_gpt.py, gpt_builders.py, model_provider.py: `git archive` of a fetched checkout),
# .fw/titan-assets (torchtitan 0.2.x's tokenizer/ and c4_test/ folders, TORCHTITAN_ASSETS).
#
#   tests/frameworks/run.sh $OUT
#
# PARTS picks the parts (default all): env (GPU, pip list, imports), fsdp (FSDP2's per-layer
# cost on one GPU: fsdp_probe.py), megatron, deepspeed, torchrun, torchtitan (each: emit,
# run 20 steps unmodified but for the site options the emitted script documents, print the
# framework's own step time beside planc's prediction). Two GPUs (not in the default):
# megatron2 (GPT-2 at dp 2, tp 2, pp 2, pp 2 interleaved), torchrun2 (DDP GPT-2, FSDP2 Llama),
# deepspeed2 (ZeRO-3 GPT-2 at dp 2), torchtitan2 (FSDP2 Llama 3.2 1B at dp 2, fully sharded).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: $0 OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
parts=" ${PARTS:-env fsdp megatron deepspeed torchrun torchtitan} "  # two GPUs: megatron2 torchrun2 deepspeed2 torchtitan2
want() { [[ "$parts" == *" $1 "* ]]; }
[ -f "$root/.dev/lib/libz3.so.4.gz" ] && [ ! -f "$root/.dev/lib/libz3.so.4" ] && gunzip -k "$root/.dev/lib/libz3.so.4.gz"
. "$root/runtime/tests/gpu/env.sh"
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ls "$root"/.whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$root"/.whl/*.whl 2>&1 | tail -n 3
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
case "$gpu" in
    *H200*) cat=H200_SXM_141GB ;;
    *H100*) cat=H100_SXM_80GB ;;
    *) cat=H100_SXM_80GB ;;
esac
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

if want env; then
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
    python3 -m pip list 2>/dev/null >"$out/piplist.txt"
    for mod in deepspeed torchtitan.train transformers megatron; do
        python3 -c "import $mod, sys; print('$mod', getattr(sys.modules['${mod%%.*}'], '__version__', '?'))" 2>&1 | tail -n 1
    done
fi

if want fsdp; then
    for shape in "--layers 12 --hidden 768 --heads 12 --batch 16 --seq 1024" \
                 "--layers 24 --hidden 2048 --heads 16 --batch 4 --seq 2048"; do
        torchrun --nproc-per-node 1 "$here/fsdp_probe.py" $shape 2>&1 | grep '^{' | tee -a "$out/fsdp.jsonl"
    done
fi

# plan_for NAME BASE FRAMEWORK [SED]: a copy of an example on this GPU with job.framework set,
# 20 steps, a checkpoint folder under OUTDIR, and SED applied (a layout change).
plan_for() {
    local f=$out/plans/$1.tp job=${1//-/_}
    mkdir -p "$out/plans"
    sed -e "s/gpu = [A-Z0-9_]*/gpu = $cat/" -e '/^ *steps *=/d' -e "s/^train {/train {\n    steps = ${STEPS:-20}/" \
        ${4:+-e "$4"} "$root/examples/$2" >"$f"
    if grep -q '^job' "$f"; then
        sed -i "s/^job \([a-z0-9_]*\) {/job \1 {\n    framework = $3/" "$f"
    else
        printf '\njob %s {\n    framework = %s\n    checkpoint_dir = "%s"\n}\n' "$job" "$3" "$out/ckpt-$1" >>"$f"
    fi
    echo "$f"
}

predict() {
    "$planc" check "$1" --format json 2>/dev/null |
        python3 -c 'import json,sys; r=json.load(sys.stdin); t=r.get("time",{}); print("%.1f" % (1e3*t.get("step_s", float("nan"))))' 2>/dev/null
}

# megatron NAME BASE [SED]: Megatron-LM from the emitted launch script (the site options the
# script documents added), its own iteration time beside planc's prediction.
megatron() {
    local name=$1 f
    [ -d /tmp/mlm/megatron ] || { mkdir -p /tmp/mlm && tar -xzf "$root/.fw/megatron-lm.tar.gz" -C /tmp/mlm; }
    f=$(plan_for "$name" "$2" megatron "${3:-}")
    # The lent machines have no Transformer Engine or apex: the plan says so (job.kernels =
    # eager), so planc prices Megatron-LM's local path and the launch runs it.
    sed -i "s/^\( *\)framework = megatron/&\n\1kernels = eager/" "$f"
    "$planc" emit "$f" --target megatron -o "$out/emit-$name" --force >"$out/$name.emit.log" 2>&1 ||
        { note "$name: emit refused: $(tail -n 3 "$out/$name.emit.log")"; return; }
    local site="--transformer-impl local --no-gradient-accumulation-fusion --no-persist-layer-norm --no-masked-softmax-fusion --eval-iters 0"
    MEGATRON_LM=/tmp/mlm timeout ${RUN_LIMIT:-400} bash "$out/emit-$name/launch-megatron.sh" $site ${MEGATRON_EXTRA:-} >"$out/$name.log" 2>&1
    local rc=$?
    echo "== $name (exit $rc)"; grep -E "iteration +[0-9]+/" "$out/$name.log" | tail -n 3; grep -iE "error|Traceback" "$out/$name.log" | head -n 5
    local ms=$(grep -oE "elapsed time per iteration \(ms\): [0-9.]+" "$out/$name.log" | tail -n 10 | awk '{s+=$NF; n++} END {if (n) printf "%.1f", s/n}')
    local loss=$(grep -oE "lm loss: [0-9.E+-]+" "$out/$name.log" | sed -n '1p;$p' | awk '{print $NF}' | tr '\n' ' ')
    note "$name: exit $rc, lm loss ${loss:-?}, measured ${ms:-?} ms/iter (mean of the last 10), planc predicts $(predict "$f") ms"
}

if want megatron; then
    megatron megatron-gpt2 gpt2-124m-1gpu.tp
    # A 256-token window on every other layer: Megatron-LM runs the emitted --window-size and
    # --window-attn-skip-freq, and its local attention masks the whole score matrix, the same
    # work as without a window (as planc prices standard attention).
    megatron megatron-gpt2-window gpt2-124m-1gpu.tp \
        's/preset = "gpt2-124m" }/preset = "gpt2-124m", sliding_window = 256, full_attention_every = 2 }/'
fi
# emitted NAME TARGET PLAN: emit, run the launch script (arguments after the plan go to it),
# and print the framework's own step time (the generated train.py's JSON line) beside planc's.
emitted() {
    local name=$1 target=$2 f=$3; shift 3
    local dir=$out/emit-$name
    "$planc" emit "$f" --target "$target" -o "$dir" --force >"$out/$name.emit.log" 2>&1 ||
        { note "$name: emit refused: $(tail -n 3 "$out/$name.emit.log")"; return; }
    local launch=$(ls "$dir"/launch-*.sh | head -n 1)
    (cd "$dir" && timeout ${RUN_LIMIT:-420} bash "$launch" "$@") >"$out/$name.log" 2>&1
    local rc=$?
    echo "== $name (exit $rc)"; grep -E "^step|^\{" "$out/$name.log" | tail -n 4
    [ $rc -ne 0 ] && grep -E "Error|error:|Traceback" "$out/$name.log" | tail -n 6
    local ms=$(grep '^{' "$out/$name.log" | tail -n 1 | python3 -c 'import json,sys; print("%.1f" % json.loads(sys.stdin.read())["step_ms_median"])' 2>/dev/null)
    local first=$(grep -m 1 -oE '^step 1/[0-9]+ \| loss [0-9.naif]+' "$out/$name.log" | awk '{print $NF}')
    local loss=$(grep '^{' "$out/$name.log" | tail -n 1 | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print("%.3f" % r["final_loss"], "peak %s GiB" % r.get("peak_gib", "?"))' 2>/dev/null)
    note "$name: exit $rc, loss ${first:-?} -> ${loss:-?}, measured ${ms:-?} ms/step, planc predicts $(predict "$f") ms; checkpoints: $(ls "$out/ckpt-$name" 2>/dev/null | tr '\n' ' ')"
}

if want torchrun; then
    emitted torchrun-gpt2 torchrun "$(plan_for torchrun-gpt2 gpt2-124m-1gpu.tp torch)"
    emitted torchrun-fsdp-llama1b torchrun "$(plan_for torchrun-fsdp-llama1b llama3.2-1b-1gpu.tp torch 's/^\( *\)recompute = none/\1recompute = none\n\1zero = 3/')"
fi
# Llama 3.2 1B from the two-GPU example at dp 2, fully sharded (zero = 3), one micro-batch of
# 4 x 2048 a GPU a step: the layout of the torchrun2 and torchtitan2 parts.
llama_dp2='s/^\( *\)tp = 2/\1tp = 1/
s/sequence_parallel = true/sequence_parallel = false/
s/^\( *\)dp = 1/\1dp = 2\n\1zero = 3/
s/micro_batch = 4.*/micro_batch = 4/'
# Two GPUs: the torchrun target's train.py at dp 2, DDP (GPT-2) and fully sharded FSDP2
# (Llama 3.2 1B, zero = 3).
if want torchrun2; then
    emitted torchrun-gpt2-ddp2 torchrun "$(plan_for torchrun-gpt2-ddp2 gpt2-124m-2gpu-dp2.tp torch)"
    emitted torchrun-fsdp2-llama1b-dp2 torchrun "$(plan_for torchrun-fsdp2-llama1b-dp2 llama3.2-1b-2gpu-tp2.tp torch "$llama_dp2")"
fi
# DeepSpeed 0.19.8 compiles its fused Adam at the first step and reads the architecture list
# as numbers: the machines' "9.0a" (Hopper's arch-specific target) stops it. A site setting,
# not the plan's: 9.0 builds the same kernels for the fused Adam.
deepspeed_arch() {
    [[ "${TORCH_CUDA_ARCH_LIST:-}" == *a* ]] && export TORCH_CUDA_ARCH_LIST=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1)
    return 0
}
if want deepspeed; then
    deepspeed_arch
    emitted deepspeed-gpt2 deepspeed "$(plan_for deepspeed-gpt2 gpt2-124m-1gpu.tp deepspeed)"
fi
# Two GPUs: the DeepSpeed engine at dp 2 with ZeRO-3 (parameters, gradients and optimizer
# state partitioned), GPT-2 124M from the two-GPU example (16 x 1024 a GPU a micro-batch).
if want deepspeed2; then
    deepspeed_arch
    emitted deepspeed-gpt2-zero3-dp2 deepspeed "$(plan_for deepspeed-gpt2-zero3-dp2 gpt2-124m-2gpu-dp2.tp deepspeed 's/^\( *\)zero = 0/\1zero = 3/')"
fi
# torchtitan 0.2.x (the one that runs on the machines' torch) reads its test corpus and
# tokenizer from a folder of its repository: .fw/titan-assets travels with the call.
export TORCHTITAN_ASSETS=${TORCHTITAN_ASSETS:-$root/.fw/titan-assets}
if want torchtitan; then
    emitted torchtitan-llama1b torchtitan "$(plan_for torchtitan-llama1b llama3.2-1b-1gpu.tp torchtitan 's/^\( *\)recompute = none/\1recompute = none\n\1zero = 3/')"
fi
# Two GPUs: torchtitan's FSDP2 at dp 2, fully sharded, Llama 3.2 1B as in torchrun2 but with
# untied embeddings: torchtitan 0.2.x shards the embedding and the output layer separately,
# so its launch refuses tied ones under FSDP over dp > 1 (the 0.3 form would keep them).
if want torchtitan2; then
    emitted torchtitan-llama1b-fsdp2-dp2 torchtitan "$(plan_for torchtitan-llama1b-fsdp2-dp2 llama3.2-1b-2gpu-tp2.tp torchtitan "$llama_dp2
s/^\( *\)preset = \"llama3.2-1b\"/&\n\1tied_embeddings = false/")"
fi

# Two GPUs (a machine with two): GPT-2 124M from the two-GPU example (16 x 1024 a GPU a
# micro-batch): dp 2 with the distributed optimizer, tp 2, pp 2 (1f1b; interleaved, vpp 2).
# M2 picks the layouts (default all four: dp2 tp2 pp2 vpp2), to split them over calls.
m2=" ${M2:-dp2 tp2 pp2 vpp2} "
if want megatron2; then
    [[ $m2 == *" dp2 "* ]] && megatron megatron-gpt2-dp2 gpt2-124m-2gpu-dp2.tp 's/^\( *\)zero = 0/\1zero = 1/'
    [[ $m2 == *" tp2 "* ]] && megatron megatron-gpt2-tp2 gpt2-124m-2gpu-dp2.tp 's/^\( *\)tp = 1/\1tp = 2/
s/^\( *\)dp = 2/\1dp = 1/
s/global_batch = 32/global_batch = 16/'
    [[ $m2 == *" pp2 "* ]] && megatron megatron-gpt2-pp2 gpt2-124m-2gpu-dp2.tp 's/^\( *\)pp = 1/\1pp = 2\n\1schedule = 1f1b/
s/^\( *\)dp = 2/\1dp = 1/
s/micro_batch = 16/micro_batch = 4/'
    [[ $m2 == *" vpp2 "* ]] && megatron megatron-gpt2-pp2-vpp2 gpt2-124m-2gpu-dp2.tp 's/^\( *\)pp = 1/\1pp = 2\n\1schedule = interleaved\n\1vpp = 2/
s/^\( *\)dp = 2/\1dp = 1/
s/micro_batch = 16/micro_batch = 4/'
fi

cat "$summary"
