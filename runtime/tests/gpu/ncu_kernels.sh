#!/usr/bin/env bash
# ncu_kernels.sh: planc's own elementwise and row kernels of a plan's step under Nsight
# Compute (two steps, CUDA graphs off so that every launch is seen; ncu holds the base clock,
# so times are longer than in training): time, DRAM throughput, issue slots and warps active,
# summed per kernel by ncu_sum.py. Which of a kernel's limits binds (bytes or instructions)
# is read from these.
#
#   runtime/tests/gpu/ncu_kernels.sh OUTDIR plan.tp [kernel regex]
#
# NCU names the profiler (default: the machines' /usr/local/cuda/bin/ncu).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
out=${1:?usage: ncu_kernels.sh OUTDIR plan.tp [regex]}
plan=${2:?usage: ncu_kernels.sh OUTDIR plan.tp [regex]}
re=${3:-'^(gelu|swiglu|colsum|sum_partials|norm_|add_bias|cross_entropy|qkv|sumsq|embed)'}
mkdir -p "$out"
name=$(basename "$plan" .tp)
m=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
m=$m,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,dram__bytes.sum
timeout 300 "${NCU:-/usr/local/cuda/bin/ncu}" --csv --metrics "$m" -k "regex:$re" \
    "$planc" run "$plan" --steps 2 --no-graphs --color never >"$out/$name.csv" 2>"$out/$name.err"
python3 "$here/ncu_sum.py" "$out/$name.csv"
