#!/usr/bin/env bash
# On the GPU machine: decode-only bench runs (`-p 0`), one line per (file, run), so
# binaries and knobs are compared in one call on one card. ONEBIT_FILES: fast synthetic
# files, "shape:type" separated by spaces (default qwen3-8b:Q4_K_M); ONEBIT_RUNS: "bin|env|np"
# items separated by ';' (bin: a binary in .dev/cuda, default 1bit, e.g. 1bit.old; env:
# "A=1 B=2" or empty; np: parallel sequences, default 1); ONEBIT_N tokens (default 64),
# ONEBIT_REPS repetitions (default 2).
set -u
source "$(dirname "$0")/device_env.sh" # repository root, OUT, B, libraries, TOK
IFS=';' read -ra runs <<<"${ONEBIT_RUNS:-1bit||1}"
for spec in ${ONEBIT_FILES:-qwen3-8b:Q4_K_M}; do
    shape=${spec%%:*} type=${spec##*:}
    f=/tmp/$shape-$type.gguf
    [ -f "$f" ] || timeout 200 "$B/1bit" synth --fast --shape "$shape" --type "$type" --tokenizer "$TOK" -t "$(nproc)" -o "$f" >/dev/null 2>&1 || { echo "synth $spec failed"; continue; }
    for r in "${runs[@]}"; do
        IFS='|' read -r bin e np <<<"$r"
        bin=${bin:-1bit} np=${np:-1}
        t=$(env $e timeout 90 "$B/$bin" bench -m "$f" -p 0 -n "${ONEBIT_N:-64}" -r "${ONEBIT_REPS:-2}" -np "$np" --device cuda 2>&1 | grep "^|" | tail -1 | awk -F'|' '{print $8}')
        echo "$spec $bin [$e] np=$np $t" | tee -a "$OUT/runs.txt"
    done
done
