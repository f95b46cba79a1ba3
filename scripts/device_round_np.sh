#!/usr/bin/env bash
# On the GPU machine: batch and decode-attention sweeps on qwen3 Q4_K_M fast synthetic
# files (tg128 at 1 sequence, aggregate at 8 and 16 under MMQ streaming settings, and a
# per-op profile of 16 sequences), prebuilt binaries in .dev/cuda.
set -u
source "$(dirname "$0")/device_env.sh" # repository root, OUT, B, libraries, TOK
for sp in qwen3-0.6b:Q4_K_M qwen3-8b:Q4_K_M; do
  shape=${sp%%:*} type=${sp##*:}; f=/tmp/$shape-$type.gguf
  "$B/1bit" synth --fast --shape $shape --type $type --tokenizer "$TOK" -t 16 -o $f >/dev/null 2>&1
  "$B/1bit" bench -m $f -p 0 -n 128 -r 2 --device cuda 2>&1 | grep "^| q"
done
f=/tmp/qwen3-8b-Q4_K_M.gguf
for e in "" "ONEBIT_CUDA_MMQ_DEC=8" "ONEBIT_CUDA_MMQ_DEC=0"; do
  echo "[$e]"; for np in 8 16; do env $e "$B/1bit" bench -m $f -p 0 -n 64 -r 2 -np $np --device cuda 2>&1 | grep "^| q"; done
done
ONEBIT_CUDA_PROFILE=1 "$B/1bit" bench -m $f -p 0 -n 16 -r 1 -np 16 --device cuda 2>&1 | grep -A25 "cuda profile"
