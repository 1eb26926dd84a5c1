#!/usr/bin/env bash
# One batch on the GPU machine: build (gpu preset), host + device tests, then the given fp4gap
# commands. Logs go to $OUT (the device tool's output folder) when it is set.
#   bash scripts/device-run.sh [--sanitize] ["fp4gap args" ...]
# SANITIZE_FILTER (a gtest filter) narrows the sanitizer runs, SANITIZE_SHARDS (default 4) sets
# the parallel shards per tool; all fp4gap output goes to
# $OUT/commands.txt (the device tool returns few files). SKIP_CTEST=1 leaves out the plain ctest
# run (for a sanitizer-only call when the device time is short).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out}"; mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
sanitize=0
if [ "${1:-}" = "--sanitize" ]; then sanitize=1; shift; fi
{ cmake --preset gpu >/dev/null && cmake --build --preset gpu -j "$(nproc)"; } >"$out/build.log" 2>&1 \
  || { tail -n 60 "$out/build.log"; exit 1; }
echo "== build ok ($SECONDS s)"
rc=0
if [ "${SKIP_CTEST:-0}" != 1 ]; then
  ctest --preset gpu -j 4 >"$out/ctest.log" 2>&1; rc=$?
  echo "== tests done ($SECONDS s)"
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest.log" | tail -n 20
  if [ $rc -ne 0 ]; then
    grep -E "FAILED|Failure|error|seed|repro" "$out/ctest.log" | head -n 40
  fi
fi
for args in "$@"; do
  echo "== fp4gap $args ($SECONDS s)"
  # shellcheck disable=SC2086
  build/gpu/fp4gap $args 2>&1 | tee -a "$out/commands.txt"
done
if [ $sanitize = 1 ]; then
  # Both tools at once, each over SANITIZE_SHARDS gtest shards (default 4): the CPU references and
  # the instrumented launches run in parallel, so the whole suite fits one call. Bounds on measured
  # time are skipped under the tools (FP4GAP_UNDER_SANITIZER=1); everything else is checked.
  shards="${SANITIZE_SHARDS:-4}"
  pids=()
  for tool in memcheck synccheck; do
    for ((i = 0; i < shards; i++)); do
      FP4GAP_UNDER_SANITIZER=1 GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i \
        compute-sanitizer --tool $tool --error-exitcode 9 build/gpu/tests/fp4gap_device_tests \
        --gtest_brief=1 ${SANITIZE_FILTER:+--gtest_filter=$SANITIZE_FILTER} >"$out/sanitizer-$tool-$i.log" 2>&1 &
      pids+=($!)
    done
  done
  failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
  for tool in memcheck synccheck; do
    clean=$(cat "$out"/sanitizer-$tool-*.log | grep -c 'ERROR SUMMARY: 0 errors')
    passed=$(cat "$out"/sanitizer-$tool-*.log | grep -oE '\[  PASSED  \] [0-9]+' | awk '{s += $4} END {print s + 0}')
    echo "== compute-sanitizer $tool: $clean of $shards shards with 0 errors, $passed tests passed ($SECONDS s)" \
      | tee -a "$out/commands.txt"
    grep -hE 'FAILED|ERROR SUMMARY: [1-9]|Invalid|Barrier error|Race' "$out"/sanitizer-$tool-*.log | head -n 20 \
      | tee -a "$out/commands.txt"
  done
  [ $failed -ne 0 ] && rc=9
fi
exit $rc
