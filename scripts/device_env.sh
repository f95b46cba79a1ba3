# Sourced (not run) by the device scripts that use the prebuilt CUDA binaries in .dev/cuda:
# moves to the repository root and sets OUT (log folder, made), B (.dev/cuda), the library
# path, and TOK (the Qwen3 tokenizer.json for `1bit synth`, unpacked from the carried .xz).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/onebit-out}
mkdir -p "$OUT"
B=.dev/cuda
export LD_LIBRARY_PATH="$PWD/$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
TOK=$B/tokenizer.json
if [ ! -f "$TOK" ] && [ -f "$B/tokenizer.json.xz" ]; then
    [ -f /tmp/tokenizer.json ] || xz -dc "$B/tokenizer.json.xz" >/tmp/tokenizer.json
    TOK=/tmp/tokenizer.json
fi
