#!/usr/bin/env bash
# One call on the GPU machine for every GPU check, cheapest and most important first:
# the CUDA op + fixture test and decode/prefill benches (scripts/device_cuda.sh),
# aggregate decode with 4 parallel sequences, the Vulkan op test and fixtures on the
# NVIDIA driver plus a Vulkan bench, then the 8B Q1_0 bench. Logs land in $OUT.
# Prepare here first: the CUDA prebuilt folder (.dev/cuda, see device_cuda.sh) and
# `scripts/device_vulkan.sh prep`; run with carry [".dev/cuda", ".dev/vulkan", ".gl"].
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/onebit-out}
export OUT
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.dev/cuda/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
F=/tmp/onebit-synth/qwen3-0.6b-Q4_K_M.gguf

echo "== CUDA: op test, fixtures, qwen3-0.6b Q4_K_M =="
ONEBIT_PREBUILT=.dev/cuda ONEBIT_BENCH="qwen3-0.6b:Q4_K_M" ONEBIT_BENCH_NOFUSE="qwen3-0.6b:Q4_K_M" \
    ONEBIT_PROFILE="qwen3-0.6b:Q4_K_M" scripts/device_cuda.sh
echo "== CUDA: aggregate decode, 1 vs 4 sequences =="
for np in 1 4; do
    timeout 120 .dev/cuda/1bit bench -m "$F" -p 0 -n 64 -r 2 -np $np --device cuda 2>&1 | tail -n 1 | tee -a "$OUT/parallel.md"
done

echo "== Vulkan on the NVIDIA driver =="
scripts/device_vulkan.sh run 2>&1 | tail -n 15
timeout 120 .dev/vulkan/1bit bench -m "$F" -p 512 -n 64 -r 2 --device vulkan 2>&1 | tail -n 3 | tee -a "$OUT/vulkan-bench.md"

echo "== CUDA: qwen3-8b Q1_0 =="
ONEBIT_PREBUILT=.dev/cuda ONEBIT_SKIP_TEST=1 ONEBIT_BENCH="qwen3-8b:Q1_0" scripts/device_cuda.sh
