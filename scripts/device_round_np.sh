export LD_LIBRARY_PATH="$PWD/.dev/cuda/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
B=.dev/cuda/1bit
xz -dc .dev/cuda/tokenizer.json.xz >/tmp/tok.json
for sp in qwen3-0.6b:Q4_K_M qwen3-8b:Q4_K_M; do
  shape=${sp%%:*} type=${sp##*:}; f=/tmp/$shape-$type.gguf
  $B synth --fast --shape $shape --type $type --tokenizer /tmp/tok.json -t 16 -o $f >/dev/null 2>&1
  $B bench -m $f -p 0 -n 128 -r 2 --device cuda 2>&1 | grep "^| q"
done
f=/tmp/qwen3-8b-Q4_K_M.gguf
for e in "" "ONEBIT_CUDA_MMQ_DEC=8" "ONEBIT_CUDA_MMQ_DEC=0"; do
  echo "[$e]"; for np in 8 16; do env $e $B bench -m $f -p 0 -n 64 -r 2 -np $np --device cuda 2>&1 | grep "^| q"; done
done
ONEBIT_CUDA_PROFILE=1 $B bench -m $f -p 0 -n 16 -r 1 -np 16 --device cuda 2>&1 | grep -A25 "cuda profile"
