#!/usr/bin/env bash
# Runs on the GPU machine with prebuilt binaries in .dev/cuda: the CUDA op + fixture test,
# then for each "shape:type" in ONEBIT_FILES a fast synthetic file (`synth --fast`), its
# bench (pp512, tg128), a per-op GPU profile of decode, and aggregate decode at
# ONEBIT_NP parallel sequences. Logs in $OUT; a summary on stdout.
set -u
source "$(dirname "$0")/device_env.sh" # repository root, OUT, B, libraries, TOK
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; date -u
if [ "${ONEBIT_SKIP_TEST:-0}" != 1 ]; then
    timeout 200 "$B/test_cuda_ops" >"$OUT/test.log" 2>&1
    echo "test_cuda_ops rc=$? $(grep -E 'checks' "$OUT/test.log" | tail -1)"
    grep -iE "CHECK failed|FAILED" "$OUT/test.log" | head -${ONEBIT_FAIL_LINES:-5}
    # ONEBIT_TEST_ENVS="A=1;B=0": the op test again under each env set (counts only)
    IFS=';' read -ra tsets <<<"${ONEBIT_TEST_ENVS:-}"
    for e in "${tsets[@]}"; do
        env $e timeout 200 "$B/test_cuda_ops" >"$OUT/test-${e//[^A-Za-z0-9_]/_}.log" 2>&1
        echo "[$e] test_cuda_ops rc=$? $(grep -E 'checks' "$OUT/test-${e//[^A-Za-z0-9_]/_}.log" | tail -1)"
    done
fi
# ONEBIT_EMB=FILE.gguf: embeddings throughput (inputs of 128 and 512 tokens).
if [ -n "${ONEBIT_EMB:-}" ]; then
    for pn in "128 32" "512 8" "32 256"; do
        set -- $pn
        timeout 120 "$B/1bit" bench -m "$ONEBIT_EMB" -p "$1" -np "$2" -r 3 --device cuda 2>&1 | grep -E "^\| [^-m]|inputs/s|error|refus" | tee -a "$OUT/bench.md"
    done
fi
for spec in ${ONEBIT_FILES:-qwen3-0.6b:Q4_K_M}; do
    shape=${spec%%:*} type=${spec##*:}
    f=/tmp/$shape-$type.gguf
    [ -f "$f" ] || timeout 200 "$B/1bit" synth --fast --shape "$shape" --type "$type" --tokenizer "$TOK" -t "$(nproc)" -o "$f" >/dev/null 2>&1 || { echo "synth $spec failed"; continue; }
    timeout 120 "$B/1bit" bench -m "$f" -p 512 -n 128 -r 3 --device cuda --peak-gbs 4300 2>&1 | grep "^|" | tail -2 | tee -a "$OUT/bench.md"
    if [ -n "${ONEBIT_PROF:-}" ]; then
        ONEBIT_CUDA_PROFILE=1 timeout 60 "$B/1bit" bench -m "$f" -p 0 -n 16 -r 1 --device cuda 2>&1 | grep -A30 "cuda profile" >"$OUT/prof-$shape-$type.txt"
        cat "$OUT/prof-$shape-$type.txt"
    fi
    if [ -n "${ONEBIT_PPROF:-}" ]; then
        ONEBIT_CUDA_PROFILE=1 timeout 60 "$B/1bit" bench -m "$f" -p 512 -n 0 -r 1 --device cuda 2>&1 | grep -A30 "cuda profile" >"$OUT/pprof-$shape-$type.txt"
        cat "$OUT/pprof-$shape-$type.txt"
    fi
    # ONEBIT_NSYS=1: Nsight Systems timeline of 32 decode steps (graph nodes traced):
    # kernel time per step against wall time shows the GPU's idle gaps.
    if [ -n "${ONEBIT_NSYS:-}" ] && command -v nsys >/dev/null; then
        timeout 120 nsys profile -q -f true -o "$OUT/nsys-$shape-$type" --cuda-graph-trace=node -t cuda \
            "$B/1bit" bench -m "$f" -p 0 -n 32 -r 1 --device cuda >/dev/null 2>&1
        timeout 120 nsys stats -q -f csv --report cuda_gpu_kern_sum "$OUT/nsys-$shape-$type.nsys-rep" 2>/dev/null |
            cut -d, -f1-4,9 | head -25 >"$OUT/nsys-$shape-$type.txt"
        cat "$OUT/nsys-$shape-$type.txt"; rm -f "$OUT/nsys-$shape-$type.sqlite"
    fi
    for np in ${ONEBIT_NP:-}; do
        timeout 120 "$B/1bit" bench -m "$f" -p 0 -n 64 -r 2 -np "$np" --device cuda 2>&1 | grep "^|" | tail -1 | tee -a "$OUT/bench.md"
    done
    # ONEBIT_ENVS="A=1 B=2;C=3": the bench again under each env set (switch comparisons);
    # ONEBIT_ENV_NP: parallel sequences for those runs too
    IFS=';' read -ra sets <<<"${ONEBIT_ENVS:-}"
    for e in "${sets[@]}"; do
        echo "[$e]" | tee -a "$OUT/bench.md"
        env $e timeout 120 "$B/1bit" bench -m "$f" -p 512 -n 128 -r 2 --device cuda --peak-gbs 4300 2>&1 | grep -E "^\| [^-m]|cuda timing|step" | tee -a "$OUT/bench.md"
        for np in ${ONEBIT_ENV_NP:-}; do
            env $e timeout 120 "$B/1bit" bench -m "$f" -p 0 -n 64 -r 2 -np "$np" --device cuda 2>&1 | grep "^|" | tail -1 | tee -a "$OUT/bench.md"
        done
    done
done
