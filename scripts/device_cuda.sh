#!/usr/bin/env bash
# Runs on the GPU machine (from the repository root): builds the CUDA backend (or uses
# prebuilt binaries), runs the CUDA op + model-fixture test, then benchmarks synthetic
# Qwen3 files (../shared/bench/ANCHORS.md shapes). Logs go to $OUT.
#
#   ONEBIT_PREBUILT=DIR   use DIR/1bit and DIR/test_cuda_ops instead of building
#                         (DIR/lib is added to LD_LIBRARY_PATH; DIR/tokenizer.json is
#                         the Qwen3 tokenizer for synth)
#   ONEBIT_BENCH="qwen3-0.6b:Q4_K_M qwen3-8b:Q4_K_M ..."   which files to bench
#   ONEBIT_SKIP_TEST=1    bench only
set -u
OUT=${OUT:-/tmp/onebit-out}
mkdir -p "$OUT"
B=${ONEBIT_PREBUILT:-}
if [ -z "$B" ]; then
    cmake -B build-cuda-dev -S . -DONEBIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build.log" 2>&1 &&
        cmake --build build-cuda-dev -j"$(nproc)" --target 1bit test_cuda_ops >>"$OUT/build.log" 2>&1 ||
        { echo "build failed"; tail -30 "$OUT/build.log"; exit 1; }
    B=build-cuda-dev
fi
export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
TOK=${ONEBIT_TOKENIZER:-$B/tokenizer.json}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
date -u +%F | tee -a "$OUT/gpu.txt"

rc=0
if [ "${ONEBIT_SKIP_TEST:-0}" != 1 ]; then
    timeout 300 "$B/test_cuda_ops" >"$OUT/test.log" 2>&1
    rc=$?
    echo "test_cuda_ops rc=$rc"
    grep -E "CHECK failed|checks|skipped|rel err" "$OUT/test.log" | head -60
fi

SY=/tmp/onebit-synth
mkdir -p "$SY"
for spec in ${ONEBIT_BENCH:-qwen3-0.6b:Q4_K_M qwen3-8b:Q4_K_M}; do
    [ "$spec" = none ] && continue
    shape=${spec%%:*} type=${spec##*:}
    f="$SY/$shape-$type.gguf"
    t0=$(date +%s)
    [ -f "$f" ] || timeout 400 "$B/1bit" synth --shape "$shape" --type "$type" --tokenizer "$TOK" -t "$(nproc)" -o "$f" >"$OUT/synth-$shape-$type.log" 2>&1 ||
        { echo "synth $spec failed"; tail -5 "$OUT/synth-$shape-$type.log"; continue; }
    echo "synth $spec: $(( $(date +%s) - t0 )) s"
    timeout 300 "$B/1bit" bench -m "$f" -p 512 -n 128 -r 3 --device cuda --peak-gbs 4300 2>&1 | tee -a "$OUT/bench.md"
done
exit $rc
