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
# cuobjdump and the nvdisasm it runs, for the SASS audit test: the toolkit's where it has them,
# else NVIDIA's own builds from PyPI (the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels),
# unpacked into .deps/cuda-tools/bin.
tools_version=13.5.37
for tool in cuobjdump nvdisasm; do
  if command -v "$tool" >/dev/null || [ -x "/usr/local/cuda/bin/$tool" ] || [ -x ".deps/cuda-tools/bin/$tool" ]; then
    continue
  fi
  echo "staging $tool $tools_version from PyPI into .deps/cuda-tools/bin"
  mkdir -p .deps/cuda-tools/bin
  wheels=$(mktemp -d)
  if python3 -m pip download --quiet --no-deps --dest "$wheels" "nvidia-cuda-$tool==$tools_version"; then
    python3 - "$tool" "$tools_version" "$wheels" <<'PY'
import glob, os, sys, zipfile
tool, version, wheels = sys.argv[1:4]
wheel = sorted(glob.glob(f"{wheels}/nvidia_cuda_{tool}-{version}-*.whl"))[-1]
with zipfile.ZipFile(wheel) as z:
    data = z.read(f"nvidia/cu13/bin/{tool}")
with open(f".deps/cuda-tools/bin/{tool}", "wb") as f:
    f.write(data)
os.chmod(f".deps/cuda-tools/bin/{tool}", 0o755)
PY
  else
    echo "warning: could not stage $tool (not in the toolkit, PyPI not reached): the SASS audit test will fail" >&2
  fi
  rm -rf "$wheels"
done
