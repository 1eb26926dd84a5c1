#!/usr/bin/env bash
# For the offline GPU machine: copies the header-only dependencies and GoogleTest's sources from
# this machine's Debian packages into .deps/ (git-ignored), to be carried there. CMake falls back
# to .deps/ only when the system has no copy of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
mkdir -p .deps/include
cp -r /usr/include/CLI .deps/include/
cp -r /usr/include/nlohmann .deps/include/
rm -rf .deps/googletest && cp -r /usr/src/googletest .deps/googletest
du -sh .deps
