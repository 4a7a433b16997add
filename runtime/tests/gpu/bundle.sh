#!/usr/bin/env bash
# bundle.sh: builds what a lent GPU machine (no Rust there) needs into .dev/ (git-ignored):
# the stripped planc binary, libz3, and the GPU test binaries. Then, on the machine (the
# `device` tool's run, carrying .dev):
#
#   runtime/tests/gpu/one_gpu.sh $OUT      # kernel tests, numerics, keep, speed + by kind, PyTorch
#   runtime/tests/gpu/layouts.sh $OUT/layouts   # on 2 GPUs
#   runtime/tests/gpu/two_gpu.sh $OUT      # on 2 GPUs: calibrate --gpus 2, speed, DDP
#   runtime/tests/gpu/attention_cudnn.sh $OUT/attn   # cuDNN's attention: autograd, speed, runs
#   runtime/tests/gpu/fp8.sh $OUT/fp8        # fp8: kernels, the 6.6B step, losses beside bf16
#   runtime/tests/gpu/graphs.sh $OUT/graphs    # CUDA graphs: bit for bit, step time with and without
set -eu
cd "$(dirname "$0")/../../.."
cargo build --release
mkdir -p .dev/tests .dev/lib
cp target/release/planc .dev/planc && strip .dev/planc
for t in autograd norms tp_kernels flash attention_cudnn fp8 graphs; do
    bin=$(cargo test --release -p planc-runtime --test "$t" --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])' | tail -n 1)
    cp "$bin" ".dev/tests/$t" && strip ".dev/tests/$t"
done
cp runtime/tests/gpu/torch_gpt_baseline.py .dev/
z3=$(ldd .dev/planc | awk '/libz3/ {print $3}')
[ -n "$z3" ] && cp -L "$z3" .dev/lib/
echo "bundle: $(du -sh .dev | cut -f1) in .dev"
