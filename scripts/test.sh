#!/usr/bin/env bash
# The test command: installs missing dependencies, builds everything, runs the host tests.
# With --gpu (on a machine with a CUDA device) it uses the gpu preset and runs the device tests too.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
preset=ci
[ "${1:-}" = "--gpu" ] && preset=gpu
bash scripts/install-deps.sh
cmake --preset "$preset"
cmake --build --preset "$preset" -j "$(nproc)"
ctest --preset "$preset"
