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
#   ONEBIT_CHECKS="fixtures unit | cuda-san | vk-val ; det fault"  (the default) which checks:
#                                  phases split by ';' run one after another, a phase's
#                                  lanes split by '|' side by side (the machine has 16
#                                  cores; sanitizers and the layer are CPU-bound), a lane's
#                                  checks in order. Timed checks (det) run in a phase alone.
#                                  unit: every test binary (test_models beside the rest),
#                                  then the census over every fixture on CUDA and Vulkan
#                                  cuda-san: the four tools side by side, each over
#                                  test_cuda_ops and test_ops' CUDA cases (sharded), a
#                                  decode and a 4-request server
#                                  vk-val: the Vulkan op tests (test_vulkan_ops and test_ops'
#                                  Vulkan cases sharded), a decode and a 4-request server
#                                  det: batch invariance as a client sees it
#                                  (scripts/concurrency.py: 64 requests alone and at once,
#                                  serve -np 16, synth qwen3-0.6b Q4_K_M) on CUDA and Vulkan
#                                  with and without --deterministic, and the 16-stream
#                                  decode cost of the flag (`bench -np 16`, synth qwen3-8b)
#                                  fault: tests/integration/test_fault.py (a faulting kernel
#                                  ends run and serve with one line) on the qwen3 fixture;
#                                  with ONEBIT_MARKS=1 also the decode cost of the progress
#                                  marks (bench with ONEBIT_CUDA_MARKS=0 / ONEBIT_VK_MARKS=0
#                                  and without; ONEBIT_MARKS_MODELS="a.gguf ..." instead of
#                                  the synth qwen3-0.6b and -8b)
#   ONEBIT_UNIT="test_a test_b"    unit: only these test binaries (default: all)
#   ONEBIT_SAN_TOOLS="memcheck racecheck initcheck synccheck"  compute-sanitizer tools
#   ONEBIT_SAN_WHAT="ops tops decode serve"  what runs under each tool (tops: test_ops)
#   ONEBIT_SAN_SHARDS=4            test_cuda_ops / test_ops under a sanitizer as that many
#                                  processes each
#   ONEBIT_VVL_SHARDS=4            test_vulkan_ops under the layer as that many processes
#   ONEBIT_DET_DEVICES="cuda vulkan"  det's backends
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
  CHECKS=${ONEBIT_CHECKS:-fixtures unit | cuda-san | vk-val ; det fault}
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
  rm -f "$OUT"/summary.*
  deadline=${ONEBIT_DEADLINE:-570}
  END=$(($(date +%s) + deadline))
  left() { local l=$((END - $(date +%s))); echo $((l > 0 ? l : 0)); }
  # each lane writes its summary lines to its own file; printed in lane order at the end
  LANE=0
  say() { printf '%s\n' "$*" >>"$OUT/summary.$LANE"; echo "[$LANE] $*"; }
  vmsg() { grep -c -E 'Validation (Error|Warning)|VUID-|SYNC-HAZARD' "$@" | awk -F: '{s += $NF} END {print s + 0}'; }
  # A sanitizer log's totals over its summaries (several processes may share one log):
  # memcheck/initcheck/synccheck "ERROR SUMMARY: N errors"; racecheck "RACECHECK SUMMARY: N
  # hazards displayed (E errors, W warnings)". Errors located in NVIDIA's own cuBLAS kernels
  # (nvjet*, cublasLt::*, *gemm*) are named apart: racecheck does not follow the
  # mbarrier/bulk-copy synchronization those Hopper kernels (and k_mmvq_tma) use, and
  # cuBLAS's split-K reduction reads workspace it allocated itself (initcheck). A sanitizer
  # prints the first 100 errors of a process; "ours" counts printed errors outside cuBLAS.
  san_count() {
    local n e w c o
    n=$(grep -cE "ERROR SUMMARY: [0-9]+ errors?$|RACECHECK SUMMARY: [0-9]+ hazards" "$1")
    e=$(grep -oE "ERROR SUMMARY: [0-9]+ errors?$|\([0-9]+ errors" "$1" | grep -oE "[0-9]+" | awk '{s += $1} END {print s + 0}')
    w=$(grep -oE "[0-9]+ warnings\)" "$1" | grep -oE "[0-9]+" | awk '{s += $1} END {print s + 0}')
    c=$(grep -cE "(Error: Race reported .* at|^=========     at) .*(nvjet|cublas|[a-z_0-9]*gemm)" "$1")
    o=$(grep -cE "(Error: Race reported .* at|^=========     at) " "$1")
    echo "$e errors ($c of the printed in cuBLAS kernels, $((o - c)) in ours), $w racecheck warnings, $n summaries"
  }
  # SIGINT to the 1bit serving on port $1 only (lanes run side by side; under a sanitizer
  # the server, not the sanitizer, must stop, so the sanitizer prints its summary)
  stop_server() {
    local p
    for p in $(pgrep -x 1bit); do
      tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "--port $1 " && kill -INT "$p"
    done
  }
  # 4 concurrent greedy requests to the server on port $1, answers in $2-N.json
  requests() {
    local pids=()
    # -f: /health answers 503 while the model loads
    for _ in $(seq 180); do curl -sf "localhost:$1/health" >/dev/null 2>&1 && break; sleep 1; done
    for i in 1 2 3 4; do
      curl -s -m 300 "localhost:$1/completion" -d "{\"prompt\":\"request $i says\",\"n_predict\":16,\"temperature\":0}" \
          >"$2-$i.json" &
      pids+=($!)
    done
    wait "${pids[@]}"
  }
  # a test binary as $shards processes (ONEBIT_TEST_SHARD), each under the command in
  # $wrap (a sanitizer, or nothing); one log, the shards' logs one after another
  sharded() {
    local log=$1 shards=$2 bin=$3 i pids=() rc=0
    shift 3
    for i in $(seq 0 $((shards - 1))); do
      ONEBIT_TEST_SHARD=$i/$shards timeout "$(left)" $wrap "$bin" "$@" >"$log.$i" 2>&1 &
      pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || rc=$?; done
    : >"$log"
    for i in $(seq 0 $((shards - 1))); do cat "$log.$i" >>"$log"; rm -f "$log.$i"; done
    return $rc
  }
  # the totals of test binary $2 over the shards' lines in log $1
  checks_of() { grep -oE "^$2: [0-9]+ checks, [0-9]+ failed" "$1" | awk '{c += $2; f += $4} END {printf "%d checks, %d failed", c, f}'; }
  # fixtures an earlier call on this warm machine made: .dev is ignored, so it outlives the
  # tree's copy, which has only what the 64 MiB carry could take
  [ -d .dev/fixtures-made ] && cp -an .dev/fixtures-made/. tests/fixtures/models/
  [ -f .dev/embed.tar ] && [ ! -f tests/fixtures/embed/bert/ref.json ] && tar xf .dev/embed.tar
  F=tests/fixtures/models/qwen3.gguf

  check_fixtures() {
    [ -n "${ONEBIT_FIXTURES:-}" ] || { say "fixtures: not made (ONEBIT_FIXTURES unset)"; return; }
    # on this machine's torch and transformers; the GGUFs through llama.cpp's converter
    if PYTHONUNBUFFERED=1 timeout "$(left)" python3 tests/fixtures/models/make_fixtures.py tests/fixtures/models \
        --llamacpp "$ONEBIT_FIXTURES" >"$OUT/fixtures.log" 2>&1; then
      (cd tests/fixtures/models && tar cf - *.long.* llama3-f8* llama3-f32* qwen3-yarn*) >/tmp/fix.tar
      mkdir -p .dev/fixtures-made && tar xf /tmp/fix.tar -C .dev/fixtures-made
      say "fixtures: made ($(du -h /tmp/fix.tar | cut -f1))"
    else
      say "fixtures: FAILED (fixtures.log)"; tail -n 20 "$OUT/fixtures.log"
    fi
  }

  # ctest's unit label: every test binary from the repository root (exit 77 = skipped),
  # test_models beside the others, then the census over every fixture on CUDA and Vulkan
  unit_one() {
    local n=$1 rc fams=""
    # test_ops' CUDA cases run under each sanitizer and its Vulkan cases under the layer
    # when those lanes run too; here then its CPU cases only (the whole run does not fit
    # beside them)
    [[ $n = test_ops && " $CHECKS " == *" cuda-san "* && " $CHECKS " == *" vk-val "* ]] && fams=cpu
    ONEBIT_TEST_BACKENDS=$fams timeout "$(left)" "$B/$n" >"$OUT/$n.log" 2>&1
    rc=$?
    echo "$n $rc" >>"$OUT/unit.rc"
    echo "$n rc=$rc $(grep -E 'checks, [0-9]+ failed' "$OUT/$n.log" | tail -n 1)"
  }
  check_unit() {
    local t n pass=0 fail=0 skip=0 failed="" mp
    : >"$OUT/unit.rc"
    [[ -x "$B/test_models" && ( -z "${ONEBIT_UNIT:-}" || " $ONEBIT_UNIT " == *" test_models "* ) ]] && { unit_one test_models & mp=$!; }
    for t in "$B"/test_*; do
      n=$(basename "$t")
      [ -x "$t" ] && [ "$n" != test_models ] || continue
      [ -n "${ONEBIT_UNIT:-}" ] && [[ " $ONEBIT_UNIT " != *" $n "* ]] && continue
      unit_one "$n"
    done
    [ -n "${mp:-}" ] && wait "$mp"
    while read -r n rc; do
      if [ "$rc" = 0 ]; then pass=$((pass + 1)); elif [ "$rc" = 77 ]; then skip=$((skip + 1)); else fail=$((fail + 1)); failed+=" $n($rc)"; fi
    done <"$OUT/unit.rc"
    say "unit: $pass passed, $fail failed, $skip skipped${failed:+ -$failed}"
    for n in test_models test_ops test_cuda_ops test_vulkan_ops test_embed; do
      [ -f "$OUT/$n.log" ] && say "  $n: $(grep -E 'checks, [0-9]+ failed' "$OUT/$n.log" | tail -n 1)"
    done
    grep -E "^(llama|qwen|gemma)|^batch invariance|deterministic matmul" "$OUT"/test_models.log "$OUT"/test_cuda_ops.log \
        >"$OUT/models-table.txt" 2>/dev/null
    if [ -z "${ONEBIT_UNIT:-}" ]; then
      for dev in cuda vulkan; do
        [ "$(left)" -lt 30 ] && { say "census $dev: not run (time)"; continue; }
        timeout "$(left)" python3 tests/census/census_fixtures.py "$B/1bit" $dev >"$OUT/census-$dev.log" 2>&1
        say "census $dev: rc=$? $(tail -n 1 "$OUT/census-$dev.log")"
      done
    fi
  }

  # one compute-sanitizer tool over test_cuda_ops (sharded), test_ops' CUDA cases
  # (sharded), a short decode and a 4-request server
  san_tool() {
    local tool=$1 port=$2 what log rc shards=${ONEBIT_SAN_SHARDS:-4}
    local wrap="compute-sanitizer --tool $tool --error-exitcode 99"
    for what in ${ONEBIT_SAN_WHAT:-ops tops decode serve}; do
      log="$OUT/san-$tool-$what.log"
      if [ "$(left)" -lt 20 ]; then say "compute-sanitizer $tool $what: not run (time)"; continue; fi
      case $what in
      ops)
        sharded "$log" "$shards" "$B/test_cuda_ops"
        say "compute-sanitizer $tool ops: rc=$? $(san_count "$log"); $shards shards: $(checks_of "$log" test_cuda_ops)"
        continue ;;
      tops)
        ONEBIT_TEST_BACKENDS=cuda sharded "$log" "$shards" "$B/test_ops"
        say "compute-sanitizer $tool test_ops (cuda cases): rc=$? $(san_count "$log"); $(grep -hoE '^cuda: [0-9]+ checks, [0-9]+ failed' "$log" | awk '{c += $2; f += $4} END {printf "cuda %d checks, %d failed", c, f}')"
        continue ;;
      decode) timeout "$(left)" $wrap "$B/1bit" run -m $F --device cuda -p "the quick brown fox" -n 24 --temp 0 >"$log" 2>&1 ;;
      serve)
        timeout "$(left)" $wrap "$B/1bit" serve -m $F --device cuda --port "$port" -np 4 >"$log" 2>&1 &
        local sp=$!
        requests "$port" "$OUT/serve-$tool"
        stop_server "$port"; wait $sp ;;
      esac
      rc=$?
      say "compute-sanitizer $tool $what: rc=$rc $(san_count "$log")$([ $what = serve ] &&
          echo ", $(grep -l '"content"' "$OUT"/serve-$tool-*.json 2>/dev/null | wc -l) of 4 answers")"
      rm -f "$OUT"/serve-$tool-*.json
    done
  }
  # the tools side by side (each mostly on the CPU), each its own lane of the summary
  check_cuda_san() {
    command -v compute-sanitizer >/dev/null || { say "compute-sanitizer: not found"; return; }
    local tool port=18080 pids=() base=$LANE k=0
    for tool in ${ONEBIT_SAN_TOOLS:-memcheck racecheck initcheck synccheck}; do
      k=$((k + 1)); port=$((port + 1))
      (LANE="$base.$k"; san_tool "$tool" "$port") &
      pids+=($!)
    done
    wait "${pids[@]}"
  }

  # the Khronos validation layer with synchronization validation over the Vulkan op tests
  # (side by side, the slow ones sharded), a decode and a 4-request server
  check_vk_val() {
    [ -f "$B/vvl/libVkLayer_khronos_validation.so" ] || { say "validation: no layer carried (vvl.tar.xz)"; return; }
    export VK_LAYER_PATH="$B/vvl" VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation
    export VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
    local wrap="" t pids=() sh=${ONEBIT_VVL_SHARDS:-4}
    (sharded "$OUT/vval-test_vulkan_ops.log" "$sh" "$B/test_vulkan_ops"; echo $? >"$OUT/vval-test_vulkan_ops.rc") &
    pids+=($!)
    (ONEBIT_TEST_BACKENDS=vulkan sharded "$OUT/vval-test_ops.log" 2 "$B/test_ops"; echo $? >"$OUT/vval-test_ops.rc") &
    pids+=($!)
    for t in test_vulkan_fold test_vulkan_repack test_vulkan_sample; do
      (timeout "$(left)" "$B/$t" >"$OUT/vval-$t.log" 2>&1; echo $? >"$OUT/vval-$t.rc") &
      pids+=($!)
    done
    wait "${pids[@]}"
    for t in test_vulkan_ops test_ops test_vulkan_fold test_vulkan_repack test_vulkan_sample; do
      say "validation $t: rc=$(cat "$OUT/vval-$t.rc") $(vmsg "$OUT/vval-$t.log") messages, $(checks_of "$OUT/vval-$t.log" $t)"
    done
    # the loader's own word that the layer is in (0 messages mean nothing without it)
    VK_LOADER_DEBUG=layer timeout "$(left)" "$B/1bit" run -m $F --device vulkan -p "the quick brown fox" -n 24 --temp 0 \
        >"$OUT/vval-decode.log" 2>&1
    say "validation decode: rc=$? $(vmsg "$OUT/vval-decode.log") messages, layer loaded: $(grep -q -i 'Insert instance layer.*KHRONOS_validation' "$OUT/vval-decode.log" && echo yes || echo NO)"
    timeout "$(left)" "$B/1bit" serve -m $F --device vulkan --port 18091 -np 4 >"$OUT/vval-serve.log" 2>&1 &
    local sp=$!
    requests 18091 "$OUT/vserve"
    stop_server 18091; wait $sp
    say "validation serve: $(vmsg "$OUT/vval-serve.log") messages, $(grep -l '"content"' "$OUT"/vserve-*.json | wc -l) of 4 answers"
    rm -f "$OUT"/vserve-*.json
    unset VK_LAYER_PATH VK_INSTANCE_LAYERS VK_LAYER_ENABLES
  }

  # batch invariance as a client sees it (scripts/concurrency.py), then the 16-stream
  # decode cost of --deterministic
  check_det() {
    xz -dc "$G/tokenizer.json.xz" >/tmp/tokenizer.json
    local S=/tmp/q06.gguf S8=/tmp/q8b.gguf port=18100 dev flag r t sp
    [ -f $S ] || timeout "$(left)" "$B/1bit" synth --shape qwen3-0.6b --type Q4_K_M --tokenizer /tmp/tokenizer.json \
        -t "$(nproc)" -o $S >>"$OUT/det.log" 2>&1 || say "det: synth qwen3-0.6b failed"
    for dev in ${ONEBIT_DET_DEVICES:-cuda vulkan}; do
      for flag in "" --deterministic; do
        if [ "$(left)" -lt 60 ]; then say "det $dev ${flag:-default}: not run (time)"; continue; fi
        port=$((port + 1))
        timeout "$(left)" "$B/1bit" serve -m $S --device $dev -np 16 --port $port $flag >>"$OUT/det.log" 2>&1 &
        sp=$!
        r=$(timeout "$(left)" python3 scripts/concurrency.py --port $port --n 64 --predict 32 --label "$dev ${flag:-default}" 2>&1 | tail -n 1)
        stop_server $port; wait $sp
        say "det: $r"
      done
    done
    if [ "$(left)" -gt 90 ] && { [ -f $S8 ] || timeout "$(left)" "$B/1bit" synth --fast --shape qwen3-8b --type Q4_K_M \
        --tokenizer /tmp/tokenizer.json -t "$(nproc)" -o $S8 >>"$OUT/det.log" 2>&1; }; then
      for dev in ${ONEBIT_DET_DEVICES:-cuda vulkan}; do
        for flag in "" --deterministic; do
          if [ "$(left)" -lt 40 ]; then say "det bench $dev ${flag:-default}: not run (time)"; continue; fi
          t=$(timeout "$(left)" "$B/1bit" bench -m $S8 -p 0 -n 64 -r 2 -np 16 --device $dev $flag 2>&1 | grep "^|" | tail -n 1)
          say "det bench qwen3-8b Q4_K_M -np 16 $dev ${flag:-default}: $t"
        done
      done
    else
      say "det bench: not run (time or synth)"
    fi
  }

  # a faulting kernel ends run and serve with one line (tests/integration/test_fault.py);
  # then, with ONEBIT_MARKS=1, the decode cost of the progress marks
  check_fault() {
    if [ "$(left)" -gt 60 ] && python3 -c "import pytest, requests" 2>/dev/null; then
      ONEBIT_FAULT_MODEL=$F ONEBIT_BIN="$B/1bit" timeout "$(left)" \
          python3 -m pytest -q -rs -s tests/integration/test_fault.py -p no:cacheprovider >"$OUT/fault.log" 2>&1
      say "fault: rc=$? $(tail -n 1 "$OUT/fault.log")"
      grep -E "MATMUL output" "$OUT/fault.log" | head -n 4 | sed 's/^/  /' >>"$OUT/summary.$LANE"
    else
      say "fault: not run (time or no pytest)"
    fi
    [ "${ONEBIT_MARKS:-0}" = 1 ] || return 0
    local m dev np marks t
    for m in ${ONEBIT_MARKS_MODELS:-/tmp/q06.gguf /tmp/q8b.gguf}; do
      [ -f "$m" ] || continue
      for dev in cuda vulkan; do
        for np in 1 16; do
          for marks in 1 0; do
            if [ "$(left)" -lt 40 ]; then say "marks bench: not run (time)"; return; fi
            t=$(ONEBIT_CUDA_MARKS=$marks ONEBIT_VK_MARKS=$marks timeout "$(left)" "$B/1bit" bench -m "$m" -p 0 -n 64 -r 3 \
                -np $np --device $dev 2>&1 | grep "^|" | tail -n 1)
            say "marks=$marks $(basename "$m") $dev -np $np: $t"
          done
        done
      done
    done
  }

  # CHECKS: phases split by ';' run one after another; a phase's lanes split by '|' run side
  # by side; a lane's checks run in order
  IFS=';' read -ra phases <<<"$CHECKS"
  nl=0
  for ph in "${phases[@]}"; do
    IFS='|' read -ra lanes <<<"$ph"
    pids=()
    for ln in "${lanes[@]}"; do
      read -ra cs <<<"$ln"
      [ ${#cs[@]} = 0 ] && continue
      nl=$((nl + 1))
      (
        LANE=$(printf '%02d' $nl)
        for c in "${cs[@]}"; do
          case $c in
          fixtures|unit|cuda-san|vk-val|det|fault) "check_${c//-/_}" ;;
          *) say "unknown check: $c" ;;
          esac
        done
      ) &
      pids+=($!)
    done
    # a step that overruns (a server that will not stop, a test past its timeout) must not
    # cost the summary: after the deadline the phase stops waiting
    while :; do
      alive=0
      for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
      [ $alive = 0 ] && break
      [ "$(date +%s)" -gt $((END + 15)) ] && { LANE=99; say "deadline: lanes still running were cut"; break; }
      sleep 2
    done
  done
  echo "== summary ($(date -u '+%T UTC'), ${SECONDS} s) =="
  cat $(ls "$OUT"/summary.* 2>/dev/null | sort -V) | tee "$OUT/summary.txt"
  ;;
*)
  echo "usage: $0 prep|run" >&2
  exit 2
  ;;
esac
