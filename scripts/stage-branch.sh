#!/usr/bin/env bash
# For comparing branches on the lent GPU machine (which gets the working tree, not the repository):
# exports each git ref's tree into .branches/<ref> (git-ignored, ~1 MB each), to be carried there
# and measured against the working tree by scripts/device-compare.sh.
#   bash scripts/stage-branch.sh next/decode-pdl [next/prefill-m64-tile ...]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bash scripts/stage-branch.sh REF [REF ...]" >&2; exit 2; }
for ref in "$@"; do
  git rev-parse --verify --quiet "$ref^{commit}" >/dev/null || { echo "not a commit: $ref" >&2; exit 2; }
  dir=".branches/${ref//\//-}"
  rm -rf "$dir" && mkdir -p "$dir"
  git archive "$ref" | tar -x -C "$dir"
  echo "$dir <- $ref ($(git rev-parse --short "$ref"))"
done
echo "carry: .branches"
