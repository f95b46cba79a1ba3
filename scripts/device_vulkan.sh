#!/usr/bin/env bash
# Runs the Vulkan op test and model fixtures on a real driver (the device machine's
# NVIDIA GPU), where nothing can be installed or fetched.
#
#   scripts/device_vulkan.sh prep   here: build, stage the binary and the runtime
#                                   libraries the device image lacks (.gl, .dev/vulkan)
#   scripts/device_vulkan.sh run    there (run tool, carry [".gl", ".dev/vulkan"]):
#                                   unpack the Vulkan loader, list devices, run the test;
#                                   logs land in $OUT
#   scripts/device_vulkan.sh bench  there: the same set-up, then `1bit info` and, for each
#                                   "shape:type" in ONEBIT_FILES, a fast synthetic file
#                                   (tokenizer from .dev/vulkan/tokenizer.json.xz) and its
#                                   bench; ONEBIT_VK_ENVS: extra env sets to compare
#                                   ("A=1 B=2;C=3"), each run once more
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in
prep)
  cmake -B build-vulkan -S . -DONEBIT_VULKAN=ON >/dev/null
  cmake --build build-vulkan -j2 --target test_vulkan_ops test_vulkan_fold test_vulkan_repack 1bit
  mkdir -p .gl .dev/vulkan/lib /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  apt-get $o update -qq
  # The loader goes into / on the device (as its README says); our other runtime
  # libraries are unpacked beside the binary and found through LD_LIBRARY_PATH.
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null)
  tmp=$(mktemp -d)
  # 1bit's own libraries (the server's libmicrohttpd and what it links, SQLite for rag)
  (cd "$tmp" && apt-get $o download libjansson4 libutf8proc2 libpcre2-8-0 libsqlite3-0 libmicrohttpd12 libgnutls30 \
      libp11-kit0 libidn2-0 libunistring2 libtasn1-6 libnettle8 libhogweed6 libgmp10 libffi8 >/dev/null)
  for f in "$tmp"/*.deb; do dpkg -x "$f" "$tmp/x"; done
  cp -a "$tmp"/x/usr/lib/x86_64-linux-gnu/*.so* .dev/vulkan/lib/
  rm -rf "$tmp"
  cp build-vulkan/test_vulkan_ops build-vulkan/test_vulkan_fold build-vulkan/test_vulkan_repack build-vulkan/1bit .dev/vulkan/
  du -sh .gl .dev/vulkan
  ;;
run|bench)
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  ldconfig
  export LD_LIBRARY_PATH=$PWD/.dev/vulkan/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  out=${OUT:-/tmp}
  # The NVIDIA ICD manifest lives in different places per image; with none, write one
  # for the driver's own library (the Vulkan ICD is inside libGLX_nvidia.so.0).
  if [ -z "${VK_DRIVER_FILES:-}" ]; then
    for j in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
             /etc/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/icd.d/nvidia_icd.json; do
      [ -f "$j" ] && { export VK_DRIVER_FILES=$j; break; }
    done
  fi
  if [ -z "${VK_DRIVER_FILES:-}" ]; then
    lib=$(ldconfig -p | awk '/libGLX_nvidia.so.0/{print $NF; exit}')
    [ -z "$lib" ] && lib=$(find / -xdev -name 'libGLX_nvidia.so.0' 2>/dev/null | head -1)
    if [ -n "$lib" ]; then
      printf '{"file_format_version":"1.0.0","ICD":{"library_path":"%s","api_version":"1.3.0"}}\n' "$lib" >/tmp/nvidia_icd.json
      export VK_DRIVER_FILES=/tmp/nvidia_icd.json
    fi
  fi
  { echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-}"; ls /usr/local/nvidia/share/vulkan/icd.d /usr/share/vulkan/icd.d \
      /etc/vulkan/icd.d 2>&1; ldconfig -p | grep -E 'nvidia|vulkan'; } >"$out/driver.txt" 2>&1 || true
  nvidia-smi -L >"$out/gpu.txt" 2>&1 || true
  set +e
  if [ "$mode" = bench ]; then
    ./.dev/vulkan/1bit info 2>&1 | tail -n 6
    [ -f /tmp/tokenizer.json ] || xz -dc .dev/vulkan/tokenizer.json.xz >/tmp/tokenizer.json
    for spec in ${ONEBIT_FILES:-qwen3-0.6b:Q4_K_M}; do
      shape=${spec%%:*} type=${spec##*:}
      f=/tmp/$shape-$type.gguf
      [ -f "$f" ] || timeout 200 ./.dev/vulkan/1bit synth --fast --shape "$shape" --type "$type" --tokenizer /tmp/tokenizer.json \
          -t "$(nproc)" -o "$f" >/dev/null 2>&1 || { echo "synth $spec failed"; continue; }
      timeout 150 ./.dev/vulkan/1bit bench -m "$f" -p 512 -n 128 -r 2 --device vulkan --peak-gbs 4300 2>&1 | grep -E "^\| [^-m]|vulkan: matmul" | tee -a "$out/vulkan-bench.md"
      # ONEBIT_VK_PROF=1: the per-dispatch profile of a decode run, whole, into $out;
      # "1 2": also with ONEBIT_VK_PROFILE=2 (start marks wait for the work before)
      for lvl in ${ONEBIT_VK_PROF:-}; do
        ONEBIT_VK_PROFILE=$lvl timeout 150 ./.dev/vulkan/1bit bench -m "$f" -p 0 -n 32 -r 1 --device vulkan \
            >"$out/vkprof$lvl-$shape-$type.txt" 2>&1
        grep -vE "^\| -|^$" "$out/vkprof$lvl-$shape-$type.txt" | tail -n 40
      done
      IFS=';' read -ra sets <<<"${ONEBIT_VK_ENVS:-}"
      for e in "${sets[@]}"; do
        echo "[$e]"
        env $e timeout 150 ./.dev/vulkan/1bit bench -m "$f" -p 512 -n 64 -r 1 --device vulkan 2>&1 | grep -E "^\| [^-m]" | tee -a "$out/vulkan-bench.md"
      done
    done
    exit 0
  fi
  rc=0
  for t in test_vulkan_ops test_vulkan_fold test_vulkan_repack; do
    ./.dev/vulkan/$t 2>&1 | tee "$out/$t.log"
    r=${PIPESTATUS[0]}
    echo "$t exit $r"
    [ "$r" -ne 0 ] && rc=$r
  done
  exit "$rc"
  ;;
*)
  echo "usage: $0 prep|run" >&2
  exit 2
  ;;
esac
