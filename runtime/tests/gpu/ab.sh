#!/usr/bin/env bash
# ab.sh: two planc binaries' steps on the same GPU in the same call, alternated (A B A B),
# so a kernel change is judged against the board's own power state rather than another
# board's. Usage: OLD=path NEW=path ab.sh OUTDIR [plan ...] (default: the speed examples).
# Each plan runs STEPS steps (default 150 for GPT-2, 40 otherwise) with the shipped profile.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/env.sh"
out=${1:?usage: ab.sh OUTDIR [plan ...]}
shift
mkdir -p "$out"
old=${OLD:?OLD names the first binary}
new=${NEW:-$planc}
plans=("$@")
if [ ${#plans[@]} -eq 0 ]; then
    for ex in gpt2-124m-1gpu llama3.2-1b-1gpu; do
        f=$out/$ex-flash.tp
        sed -e "s/attention = [a-z]*/attention = flash/" "$root/examples/$ex.tp" >"$f"
        plans+=("$f")
    done
fi
for f in "${plans[@]}"; do
    steps=${STEPS:-40}
    case "$f" in *gpt2*) steps=${STEPS:-150} ;; esac
    for rep in 1 2; do
        for side in old new; do
            bin=$old
            [ "$side" = new ] && bin=$new
            line=$("$bin" run "$f" --steps "$steps" --color never 2>&1 | grep -E '^time')
            echo "$(basename "$f") $side $rep: $line"
        done
    done
done
