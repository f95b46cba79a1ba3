#!/usr/bin/env bash
# Runs on the GPU machine: Nsight Compute on the decode matvec kernels of fast synthetic
# files ("shape:type" in ONEBIT_FILES), uncaptured steps. Reports in $OUT, summary on stdout.
# ONEBIT_KERNEL (regex), ONEBIT_SKIP, ONEBIT_COUNT pick the launches; ONEBIT_NCU_SECTIONS
# replaces the section list (e.g. "--section SpeedOfLight" for durations of a whole layer);
# ONEBIT_NCU_ARGS adds bench arguments (e.g. "-np 16").
set -u
source "$(dirname "$0")/device_env.sh" # repository root, OUT, B, libraries, TOK
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for spec in ${ONEBIT_FILES:-qwen3-8b:Q4_K_M}; do
    shape=${spec%%:*} type=${spec##*:}
    f=/tmp/$shape-$type.gguf
    [ -f "$f" ] || timeout 200 "$B/1bit" synth --fast --shape "$shape" --type "$type" --tokenizer "$TOK" -t "$(nproc)" -o "$f" >/dev/null 2>&1
    ONEBIT_CUDA_GRAPHS=0 timeout 240 "$NCU" --clock-control none --kernel-name-base demangled -k "regex:${ONEBIT_KERNEL:-k_mmvq}" -s "${ONEBIT_SKIP:-300}" -c "${ONEBIT_COUNT:-8}" \
        ${ONEBIT_NCU_SECTIONS:---section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section InstructionStats --section SchedulerStats} \
        "$B/1bit" bench -m "$f" -p 0 -n 8 -r 1 ${ONEBIT_NCU_ARGS:-} --device cuda >"$OUT/ncu-$shape-$type${ONEBIT_TAG:-}.txt" 2>&1
    echo "== $spec"
    grep -E "k_mmvq|k_attn|k_rms|Memory Throughput|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Grid Size|Stall Long|Warp Cycles Per Issued|Issue Slot|Theoretical Occ" "$OUT/ncu-$shape-$type${ONEBIT_TAG:-}.txt" | sed 's/  */ /g' | head -${ONEBIT_LINES:-120}
done
