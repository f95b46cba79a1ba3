#!/usr/bin/env bash
# Every GPU check in one call on the GPU machine: the unit tests of a CUDA + Vulkan build
# (as ctest runs them: from the repository root, exit 77 = skipped), the CUDA op test and a
# short decode and server run under compute-sanitizer (memcheck, racecheck, initcheck,
# synccheck), and the Vulkan op tests, a decode and a server run under the Khronos
# validation layer with synchronization validation. The device image has no compiler for
# our C dependencies, so everything is built here and carried.
#
#   scripts/device_check.sh prep   here: build (build-gpu), pack the binaries, the runtime
#                                  libraries the image lacks, the Vulkan loader (.gl) and
#                                  Debian's validation layer into .dev/gpu
#   scripts/device_check.sh run    there (run tool, carry [".dev/gpu", ".gl"]): the checks;
#                                  a summary last, logs in $OUT
#   ONEBIT_CHECKS="fixtures unit cuda-san vk-val det fault"  which parts of run, in that order (default: all)
#                                  det: batch invariance as a client sees it
#                                  (scripts/concurrency.py: 64 requests alone and at once,
#                                  serve -np 16, synth qwen3-0.6b Q4_K_M) on CUDA and Vulkan
#                                  with and without --deterministic, and the 16-stream
#                                  decode cost of the flag (`bench -np 16`, synth qwen3-8b)
#                                  fault: tests/integration/test_fault.py (a faulting kernel
#                                  ends run and serve with one line) on the qwen3 fixture,
#                                  and the decode cost of the progress marks (bench with
#                                  ONEBIT_CUDA_MARKS=0 / ONEBIT_VK_MARKS=0 and without;
#                                  ONEBIT_MARKS_MODELS="a.gguf ..." instead of the synth
#                                  qwen3-0.6b and -8b)
#   ONEBIT_UNIT="test_a test_b"    unit: only these test binaries (default: all)
#   ONEBIT_SAN_TOOLS="memcheck racecheck initcheck synccheck"  compute-sanitizer tools
#   ONEBIT_SAN_WHAT="ops decode serve"  what runs under each tool
#   ONEBIT_SAN_SHARDS=4            test_cuda_ops under a sanitizer as that many processes
#   ONEBIT_DEADLINE=S              stop starting steps S seconds after the start (default
#                                  570, inside the run tool's 600), each step capped to
#                                  what is left; steps not reached say so in the summary
#   ONEBIT_FIXTURES=DIR            fixtures: regenerate the model fixtures with
#                                  tests/fixtures/models/make_fixtures.py (llama.cpp's
#                                  converter from DIR, e.g. .dev/llamacpp, carried) into
#                                  tests/fixtures/models first, and pack them into $OUT
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
G=.dev/gpu
case "$mode" in
prep)
  set -e
  cmake -B build-gpu -S . -DONEBIT_CUDA=ON -DONEBIT_VULKAN=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build build-gpu -j"$(nproc)"
  rm -rf "$G" && mkdir -p "$G/lib" "$G/vvl" .gl /tmp/amd64/partial
  # one archive: the binaries share the CUDA fat binary, which a large window packs once
  (cd build-gpu && tar cf - 1bit test_*[!.]*) | xz -T0 --lzma2=preset=6,dict=192MiB >"$G/bin.tar.xz"
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  apt-get $o update -qq
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null)
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get $o download libjansson4 libutf8proc2 libpcre2-8-0 libsqlite3-0 libmicrohttpd12 libgnutls30 \
      libp11-kit0 libidn2-0 libunistring2 libtasn1-6 libnettle8 libhogweed6 libgmp10 libffi8 \
      vulkan-validationlayers >/dev/null)
  for f in "$tmp"/*.deb; do dpkg -x "$f" "$tmp/x"; done
  cp -a "$tmp"/x/usr/lib/x86_64-linux-gnu/*.so* "$G/lib/"
  mv "$G"/lib/libVkLayer_khronos_validation.so "$G/vvl/"
  # the layer manifest names the library by bare name: it is found in $G/vvl via the path
  sed 's|"library_path": *"[^"]*"|"library_path": "./libVkLayer_khronos_validation.so"|' \
      "$tmp"/x/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json >"$G/vvl/VkLayer_khronos_validation.json"
  rm -rf "$tmp"
  # the Qwen3 tokenizer for `1bit synth` (det)
  xz -9 -c ../shared/data/tokenizers/qwen3/tokenizer.json >"$G/tokenizer.json.xz"
  # the carry is 64 MiB with the tree: the libraries and the 22 MB layer travel packed, the
  # layer apart (a call without vk-val may leave vvl.tar.xz behind)
  tar cf - -C "$G" lib | xz -T0 >"$G/rt.tar.xz" && tar cf - -C "$G" vvl | xz -T0 >"$G/vvl.tar.xz" && rm -rf "$G/lib" "$G/vvl"
  du -sh "$G" .gl
  ;;
run)
  OUT=${OUT:-/tmp/onebit-out}
  mkdir -p "$OUT" /tmp/gpu
  CHECKS=${ONEBIT_CHECKS:-fixtures unit cuda-san vk-val det fault}
  xz -dc "$G/bin.tar.xz" | tar xf - -C /tmp/gpu
  xz -dc "$G/rt.tar.xz" | tar xf - -C /tmp/gpu
  [ -f "$G/vvl.tar.xz" ] && xz -dc "$G/vvl.tar.xz" | tar xf - -C /tmp/gpu
  B=/tmp/gpu
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  export LD_LIBRARY_PATH="$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  if [ -z "${VK_DRIVER_FILES:-}" ]; then
    for j in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
             /etc/vulkan/icd.d/nvidia_icd.json; do
      [ -f "$j" ] && { export VK_DRIVER_FILES=$j; break; }
    done
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
  date -u '+%F %T UTC' | tee -a "$OUT/gpu.txt"
  summary=()
  deadline=${ONEBIT_DEADLINE:-570}
  left() { local l=$((deadline - SECONDS)); echo $((l > 0 ? l : 0)); }
  # A sanitizer log's totals over its summaries (several processes may share one log):
  # memcheck/initcheck/synccheck "ERROR SUMMARY: N errors"; racecheck "RACECHECK SUMMARY: N
  # hazards displayed (E errors, W warnings)", with the errors reported in NVIDIA's own
  # cuBLAS kernels (nvjet*, *gemm*) counted apart: racecheck does not follow the
  # mbarrier/bulk-copy synchronization those Hopper kernels (and k_mmvq_tma) use.
  san_count() {
    local n e w c
    n=$(grep -cE "(ERROR|RACECHECK) SUMMARY" "$1")
    e=$(grep -oE "ERROR SUMMARY: [0-9]+ error|\([0-9]+ errors" "$1" | grep -oE "[0-9]+" | awk '{s += $1} END {print s + 0}')
    w=$(grep -oE "[0-9]+ warnings\)" "$1" | grep -oE "[0-9]+" | awk '{s += $1} END {print s + 0}')
    c=$(grep -cE "Error: Race reported .* at (nvjet|[a-z_0-9]*gemm)" "$1")
    echo "$e errors ($c in cuBLAS kernels), $w racecheck warnings, $n summaries"
  }
  # 4 concurrent greedy requests to the server on port $1, answers in $2-N.json
  requests() {
    local pids=()
    # -f: /health answers 503 while the model loads
    for _ in $(seq 120); do curl -sf "localhost:$1/health" >/dev/null 2>&1 && break; sleep 1; done
    for i in 1 2 3 4; do
      curl -s "localhost:$1/completion" -d "{\"prompt\":\"request $i says\",\"n_predict\":16,\"temperature\":0}" \
          >"$2-$i.json" &
      pids+=($!)
    done
    wait "${pids[@]}"
  }
  # fixtures an earlier call on this warm machine made: .dev is ignored, so it outlives the
  # tree's copy, which has only what the 64 MiB carry could take
  [ -d .dev/fixtures-made ] && cp -an .dev/fixtures-made/. tests/fixtures/models/
  if [[ " $CHECKS " == *" fixtures "* && -n "${ONEBIT_FIXTURES:-}" ]]; then
    # on this machine's torch and transformers; the GGUFs through llama.cpp's converter
    if PYTHONUNBUFFERED=1 python3 tests/fixtures/models/make_fixtures.py tests/fixtures/models \
        --llamacpp "$ONEBIT_FIXTURES" >"$OUT/fixtures.log" 2>&1; then
      (cd tests/fixtures/models && tar cf - *.long.* llama3-f8* llama3-f32* qwen3-yarn*) | xz -T0 >/tmp/fix.tar.xz
      mkdir -p .dev/fixtures-made && tar xJf /tmp/fix.tar.xz -C .dev/fixtures-made
      split -b 15m /tmp/fix.tar.xz "$OUT/fixtures.tar.xz."
      summary+=("fixtures: made ($(du -h /tmp/fix.tar.xz | cut -f1) packed)")
    else
      summary+=("fixtures: FAILED (fixtures.log)"); tail -n 20 "$OUT/fixtures.log"
    fi
  fi
  if [[ " $CHECKS " == *" unit "* ]]; then
    # ctest's unit label: every test binary from the repository root
    pass=0 fail=0 skip=0 failed=""
    for t in "$B"/test_*; do
      [ -n "${ONEBIT_UNIT:-}" ] && [[ " $ONEBIT_UNIT " != *" $(basename "$t") "* ]] && continue
      n=$(basename "$t")
      timeout "$(left)" "$t" >"$OUT/$n.log" 2>&1
      rc=$?
      if [ $rc = 0 ]; then pass=$((pass + 1)); elif [ $rc = 77 ]; then skip=$((skip + 1)); else fail=$((fail + 1)); failed+=" $n($rc)"; fi
      echo "$n rc=$rc $(grep -E 'checks, [0-9]+ failed' "$OUT/$n.log" | tail -n 1)"
    done
    summary+=("unit: $pass passed, $fail failed, $skip skipped${failed:+ -$failed}")
    grep -E "^(llama|qwen|gemma)|^batch invariance|deterministic matmul" "$OUT"/test_models.log "$OUT"/test_cuda_ops.log \
        >"$OUT/models-table.txt" 2>/dev/null
  fi
  if [[ " $CHECKS " == *" cuda-san "* ]] && command -v compute-sanitizer >/dev/null; then
    F=tests/fixtures/models/qwen3.gguf
    for tool in ${ONEBIT_SAN_TOOLS:-memcheck racecheck initcheck synccheck}; do
      for what in ${ONEBIT_SAN_WHAT:-ops decode serve}; do
        log="$OUT/san-$tool-$what.log"
        if [ "$(left)" -lt 20 ]; then summary+=("compute-sanitizer $tool $what: not run (time)"); continue; fi
        case $what in
        ops)
          # the groups of test_cuda_ops spread over $shards processes on the one GPU
          # (ONEBIT_TEST_SHARD, testutil.h); their logs one after another in $log
          shards=${ONEBIT_SAN_SHARDS:-4} pids=() rc=0
          for i in $(seq 0 $((shards - 1))); do
            ONEBIT_TEST_SHARD=$i/$shards timeout "$(left)" compute-sanitizer --tool $tool --error-exitcode 99 \
                "$B/test_cuda_ops" >"$log.$i" 2>&1 &
            pids+=($!)
          done
          for p in "${pids[@]}"; do wait "$p" || rc=$?; done
          : >"$log"
          for i in $(seq 0 $((shards - 1))); do cat "$log.$i" >>"$log"; rm -f "$log.$i"; done
          summary+=("compute-sanitizer $tool ops: $shards shards, checks: $(grep -oE '[0-9]+ checks, [0-9]+ failed' "$log" | tr '\n' ' ')")
          summary+=("compute-sanitizer $tool ops: rc=$rc $(san_count "$log")")
          continue ;;
        decode) timeout "$(left)" compute-sanitizer --tool $tool --error-exitcode 99 "$B/1bit" run -m $F --device cuda \
                    -p "the quick brown fox" -n 24 --temp 0 >"$log" 2>&1 ;;
        serve)
          timeout "$(left)" compute-sanitizer --tool $tool --error-exitcode 99 "$B/1bit" serve -m $F --device cuda --port 18080 -np 4 \
              >"$log" 2>&1 &
          sp=$!
          requests 18080 "$OUT/serve-$tool"
          # stop the server, not the sanitizer, so the sanitizer prints its summary
          pkill -INT -x 1bit 2>/dev/null; wait $sp ;;
        esac
        rc=$?
        summary+=("compute-sanitizer $tool $what: rc=$rc $(san_count "$log")$([ $what = serve ] &&
            echo ", $(grep -l '"content"' "$OUT"/serve-$tool-*.json 2>/dev/null | wc -l) of 4 answers")")
        rm -f "$OUT"/serve-$tool-*.json
      done
    done
  fi
  if [[ " $CHECKS " == *" vk-val "* ]]; then
    export VK_LAYER_PATH="$B/vvl" VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation
    export VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
    for t in test_vulkan_ops test_vulkan_fold test_vulkan_repack test_vulkan_sample; do
      if [ "$(left)" -lt 20 ]; then summary+=("validation $t: not run (time)"); continue; fi
      timeout "$(left)" "$B/$t" >"$OUT/vval-$t.log" 2>&1
      summary+=("validation $t: rc=$? $(grep -c -E 'Validation (Error|Warning)|VUID-|SYNC-HAZARD' "$OUT/vval-$t.log") messages")
    done
    F=tests/fixtures/models/qwen3.gguf
    # the loader's own word that the layer is in (0 messages mean nothing without it)
    VK_LOADER_DEBUG=layer timeout "$(left)" "$B/1bit" run -m $F --device vulkan -p "the quick brown fox" -n 24 --temp 0 \
        >"$OUT/vval-decode.log" 2>&1
    summary+=("validation decode: rc=$? $(grep -c -E 'Validation (Error|Warning)|VUID-|SYNC-HAZARD' "$OUT/vval-decode.log") messages, layer loaded: $(grep -q -i 'Insert instance layer.*KHRONOS_validation' "$OUT/vval-decode.log" && echo yes || echo NO)")
    timeout "$(left)" "$B/1bit" serve -m $F --device vulkan --port 18081 -np 4 >"$OUT/vval-serve.log" 2>&1 &
    sp=$!
    requests 18081 "$OUT/vserve"
    kill -INT $sp 2>/dev/null; wait $sp
    summary+=("validation serve: $(grep -c -E 'Validation (Error|Warning)|VUID-|SYNC-HAZARD' "$OUT/vval-serve.log") messages, $(grep -l '"content"' "$OUT"/vserve-*.json | wc -l) of 4 answers")
    rm -f "$OUT"/vserve-*.json
    unset VK_LAYER_PATH VK_INSTANCE_LAYERS VK_LAYER_ENABLES
  fi
  if [[ " $CHECKS " == *" det "* ]]; then
    xz -dc "$G/tokenizer.json.xz" >/tmp/tokenizer.json
    S=/tmp/q06.gguf S8=/tmp/q8b.gguf
    timeout "$(left)" "$B/1bit" synth --shape qwen3-0.6b --type Q4_K_M --tokenizer /tmp/tokenizer.json -t "$(nproc)" -o $S \
        >"$OUT/det.log" 2>&1 || summary+=("det: synth qwen3-0.6b failed")
    port=18100
    for dev in ${ONEBIT_DET_DEVICES:-cuda vulkan}; do
      for flag in "" --deterministic; do
        if [ "$(left)" -lt 60 ]; then summary+=("det $dev ${flag:-default}: not run (time)"); continue; fi
        port=$((port + 1))
        timeout "$(left)" "$B/1bit" serve -m $S --device $dev -np 16 --port $port $flag >>"$OUT/det.log" 2>&1 &
        sp=$!
        r=$(timeout "$(left)" python3 scripts/concurrency.py --port $port --n 64 --predict 32 --label "$dev ${flag:-default}" 2>&1 | tail -n 1)
        kill -INT $sp 2>/dev/null; wait $sp
        summary+=("det: $r")
      done
    done
    if [ "$(left)" -gt 90 ] && timeout "$(left)" "$B/1bit" synth --fast --shape qwen3-8b --type Q4_K_M --tokenizer /tmp/tokenizer.json \
        -t "$(nproc)" -o $S8 >>"$OUT/det.log" 2>&1; then
      for dev in ${ONEBIT_DET_DEVICES:-cuda vulkan}; do
        for flag in "" --deterministic; do
          if [ "$(left)" -lt 40 ]; then summary+=("det bench $dev ${flag:-default}: not run (time)"); continue; fi
          t=$(timeout "$(left)" "$B/1bit" bench -m $S8 -p 0 -n 64 -r 2 -np 16 --device $dev $flag 2>&1 | grep "^|" | tail -n 1)
          summary+=("det bench qwen3-8b Q4_K_M -np 16 $dev ${flag:-default}: $t")
        done
      done
    fi
  fi
  if [[ " $CHECKS " == *" fault "* ]]; then
    if [ "$(left)" -gt 60 ] && python3 -c "import pytest, requests" 2>/dev/null; then
      ONEBIT_FAULT_MODEL=tests/fixtures/models/qwen3.gguf ONEBIT_BIN="$B/1bit" timeout "$(left)" \
          python3 -m pytest -q -rs -s tests/integration/test_fault.py -p no:cacheprovider >"$OUT/fault.log" 2>&1
      summary+=("fault: rc=$? $(tail -n 1 "$OUT/fault.log")")
      grep -E "MATMUL output" "$OUT/fault.log" | head -n 4 | sed 's/^/  /' >>"$OUT/fault.lines"
    elif [ "$(left)" -gt 60 ]; then
      # no pytest here: the run case by hand
      for dev in cuda vulkan; do
        ONEBIT_TEST_FAULT=output ONEBIT_VK_TIMEOUT_S=5 timeout 120 "$B/1bit" run -m tests/fixtures/models/qwen3.gguf \
            --device $dev -p hi -n 4 >"$OUT/fault-$dev.log" 2>&1
        summary+=("fault run $dev: rc=$? (124: hung), $(grep -c 'MATMUL output' "$OUT/fault-$dev.log") naming line(s): $(grep -m1 'MATMUL output' "$OUT/fault-$dev.log")")
      done
    else
      summary+=("fault: not run (time)")
    fi
    # what the marks cost: one-stream and 16-stream decode with and without them
    marks_models=${ONEBIT_MARKS_MODELS:-/tmp/q06.gguf /tmp/q8b.gguf}
    if [[ " $marks_models " == *" /tmp/q06.gguf "* && ! -f /tmp/q06.gguf && -f "$G/tokenizer.json.xz" ]]; then
      xz -dc "$G/tokenizer.json.xz" >/tmp/tokenizer.json
      timeout "$(left)" "$B/1bit" synth --shape qwen3-0.6b --type Q4_K_M --tokenizer /tmp/tokenizer.json -t "$(nproc)" \
          -o /tmp/q06.gguf >>"$OUT/fault.log" 2>&1
    fi
    for m in $marks_models; do
      [ -f $m ] || continue
      for dev in cuda vulkan; do
        for np in 1 16; do
          for marks in 1 0; do
            if [ "$(left)" -lt 40 ]; then summary+=("marks bench: not run (time)"); break 3; fi
            t=$(ONEBIT_CUDA_MARKS=$marks ONEBIT_VK_MARKS=$marks timeout "$(left)" "$B/1bit" bench -m $m -p 0 -n 64 -r 3 \
                -np $np --device $dev 2>&1 | grep "^|" | tail -n 1)
            summary+=("marks=$marks $(basename $m) $dev -np $np: $t")
          done
        done
      done
    done
  fi
  echo "== summary =="
  printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
  ;;
*)
  echo "usage: $0 prep|run" >&2
  exit 2
  ;;
esac
