#!/usr/bin/env bash
# Runs on the GPU machine: the CUDA model-fixture test under each fused-pattern mask
# (ONEBIT_CUDA_FUSE bits, see cuda_int.h), staging on/off and forced attention splits,
# then the memory and race checkers on the default configuration. Prebuilt binaries in
# .dev/cuda (as device_cuda.sh). Finds which fused kernel breaks a model end to end.
set -u
source "$(dirname "$0")/device_env.sh" # repository root, OUT, B, libraries, TOK
export ONEBIT_TEST_FIXTURES_ONLY=1
run() { # name, env...
    local name=$1; shift
    env "$@" timeout 120 "$B/test_cuda_ops" >"$OUT/fx-$name.log" 2>&1
    echo "[$name] rc=$? $(grep -c 'CHECK failed' "$OUT/fx-$name.log") failed; worst: $(grep -o 'rel err [0-9.e+-]*' "$OUT/fx-$name.log" | sort -t' ' -k3 -g | tail -1)"
}
run all
run none ONEBIT_CUDA_FUSE=0
run none-nostage ONEBIT_CUDA_FUSE=0 ONEBIT_CUDA_STAGE=0
run none-nostage-split1 ONEBIT_CUDA_FUSE=0 ONEBIT_CUDA_STAGE=0 ONEBIT_CUDA_ATTN_SPLIT=1
run nostage ONEBIT_CUDA_STAGE=0
run split1 ONEBIT_CUDA_ATTN_SPLIT=1
for m in 2 4 16; do run "only$m" ONEBIT_CUDA_FUSE=$m ONEBIT_CUDA_STAGE=0; done
grep -h "rel err" "$OUT/fx-all.log" | head -12
CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$CS" ]; then
    for tool in memcheck racecheck; do
        timeout 200 "$CS" --tool $tool --print-limit 20 "$B/test_cuda_ops" >"$OUT/cs-$tool.log" 2>&1
        echo "[$tool] rc=$?"; grep -E "ERROR SUMMARY|Invalid|hazard|RACECHECK SUMMARY" "$OUT/cs-$tool.log" | head -8
    done
fi
