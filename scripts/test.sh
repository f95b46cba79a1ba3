#!/usr/bin/env bash
# Runs every test: installs dependencies, builds, then the unit tests (C, ctest) and the
# integration tests (pytest against the built binary and the real Gemma 3 270M).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -B build -S . -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
cd build && ctest --output-on-failure -j1 "$@"
