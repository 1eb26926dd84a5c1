#!/usr/bin/env bash
# Sets everything up on a fresh machine and runs the main job, `fp4gap diagnose`.
# On a machine with a CUDA device it measures; without one it runs the CPU-only checks and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
bash scripts/install-deps.sh
cmake --preset ci
cmake --build --preset ci -j "$(nproc)" --target fp4gap
./build/ci/fp4gap diagnose "$@"
