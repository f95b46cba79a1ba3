#!/usr/bin/env bash
# On the GPU machine: decode-only bench runs listed in ONEBIT_RUNS, "bin|env|np" items
# separated by ';' (bin: a binary name in .dev/cuda, e.g. 1bit or 1bit.old; env: "A=1 B=2"
# or empty; np: parallel sequences), on the fast synthetic file ONEBIT_FILE ("shape:type",
# default qwen3-8b:Q4_K_M); one line per run. A/B of binaries and knobs in one call.
set -u
source "$(dirname "$0")/device_env.sh" # repository root, OUT, B, libraries, TOK
spec=${ONEBIT_FILE:-qwen3-8b:Q4_K_M}
shape=${spec%%:*} type=${spec##*:}
f=/tmp/$shape-$type.gguf
[ -f "$f" ] || timeout 200 "$B/1bit" synth --fast --shape "$shape" --type "$type" --tokenizer "$TOK" -t "$(nproc)" -o "$f" >/dev/null 2>&1 || { echo "synth $spec failed"; exit 1; }
IFS=';' read -ra runs <<<"${ONEBIT_RUNS:-1bit||1}"
for r in "${runs[@]}"; do
    IFS='|' read -r bin e np <<<"$r"
    t=$(env $e timeout 90 "$B/$bin" bench -m "$f" -p 0 -n "${ONEBIT_N:-64}" -r "${ONEBIT_REPS:-2}" -np "$np" --device cuda 2>&1 | grep "^|" | tail -1 | awk -F'|' '{print $8}')
    echo "$spec $bin [$e] np=$np $t" | tee -a "$OUT/runs.txt"
done
