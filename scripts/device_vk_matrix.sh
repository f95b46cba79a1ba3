#!/usr/bin/env bash
# On the device: the Vulkan op test under several env sets (counts and first failures),
# e.g. ONEBIT_VK_TEST_ENVS="ONEBIT_VK_Q8=0;ONEBIT_VK_NO_FUSE=1"
set -u
cd "$(dirname "$0")/.."
bash scripts/device_vulkan.sh run >"${OUT:-/tmp}/vk-default.txt" 2>&1
echo "[default] $(grep -E 'checks' "${OUT:-/tmp}/vk-default.txt" | tail -1)"
grep -E "CHECK failed" "${OUT:-/tmp}/vk-default.txt" | head -5
IFS=';' read -ra sets <<<"${ONEBIT_VK_TEST_ENVS:-}"
for e in "${sets[@]}"; do
    f="${OUT:-/tmp}/vk-${e//[^A-Za-z0-9_]/_}.txt"
    env $e bash scripts/device_vulkan.sh run >"$f" 2>&1
    echo "[$e] $(grep -E 'checks' "$f" | tail -1)"
    grep -E "CHECK failed|error" "$f" | head -6
done
