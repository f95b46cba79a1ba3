#!/usr/bin/env bash
# Runs on the GPU machine: decode-only bench (tg128, -p 0) of fast synthetic files
# ("shape:type" in ONEBIT_FILES) under each env set of ONEBIT_ENVS ("A=1 B=2;C=3"; an
# empty set is the default), one line per (file, set): quick knob sweeps.
set -u
source "$(dirname "$0")/device_env.sh" # repository root, OUT, B, libraries, TOK
IFS=';' read -ra sets <<<"${ONEBIT_ENVS:-}"
for spec in ${ONEBIT_FILES:-qwen3-8b:Q4_K_M}; do
    shape=${spec%%:*} type=${spec##*:}
    f=/tmp/$shape-$type.gguf
    [ -f "$f" ] || timeout 200 "$B/1bit" synth --fast --shape "$shape" --type "$type" --tokenizer "$TOK" -t "$(nproc)" -o "$f" >/dev/null 2>&1 || { echo "synth $spec failed"; continue; }
    for e in "${sets[@]}"; do
        r=$(env $e timeout 60 "$B/1bit" bench -m "$f" -p 0 -n 128 -r "${ONEBIT_REPS:-2}" ${ONEBIT_BENCH_ARGS:-} --device cuda 2>&1 | grep "^|" | tail -1 | awk -F'|' '{print $8}')
        echo "$spec [$e] $r" | tee -a "$OUT/sweep.txt"
    done
done
