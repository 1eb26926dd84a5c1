#!/usr/bin/env bash
# Installs the build dependencies that are missing, from Debian/Ubuntu packages.
# The CUDA toolkit (nvcc, cuBLAS, cuBLASLt) must already be installed (it is on the CI machines
# and on the GPU machine); this script only checks for it.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/CLI/CLI.hpp ] || [ -f .deps/include/CLI/CLI.hpp ] || need+=(libcli11-dev)
[ -f /usr/include/nlohmann/json.hpp ] || [ -f .deps/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -d .deps/googletest ]; then need+=(libgtest-dev googletest); fi
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if ! command -v nvcc >/dev/null; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then
    echo "note: nvcc is at /usr/local/cuda/bin; add it to PATH" >&2
  else
    echo "error: the CUDA toolkit (nvcc) is required to build fp4gap" >&2; exit 1
  fi
fi
