#!/usr/bin/env bash
# One batch on the GPU machine: build (gpu preset), host + device tests, then the given fp4gap
# commands. Logs go to $OUT (the device tool's output folder) when it is set.
#   bash scripts/device-run.sh [--sanitize] ["fp4gap args" ...]
# SANITIZE_FILTER (a gtest filter) narrows the sanitizer runs; all fp4gap output goes to
# $OUT/commands.txt (the device tool returns few files).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out}"; mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
sanitize=0
if [ "${1:-}" = "--sanitize" ]; then sanitize=1; shift; fi
{ cmake --preset gpu >/dev/null && cmake --build --preset gpu -j "$(nproc)"; } >"$out/build.log" 2>&1 \
  || { tail -n 60 "$out/build.log"; exit 1; }
echo "== build ok ($SECONDS s)"
ctest --preset gpu -j 4 >"$out/ctest.log" 2>&1; rc=$?
echo "== tests done ($SECONDS s)"
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest.log" | tail -n 20
if [ $rc -ne 0 ]; then
  grep -E "FAILED|Failure|error|seed|repro" "$out/ctest.log" | head -n 40
fi
for args in "$@"; do
  echo "== fp4gap $args ($SECONDS s)"
  # shellcheck disable=SC2086
  build/gpu/fp4gap $args 2>&1 | tee -a "$out/commands.txt"
done
if [ $sanitize = 1 ]; then
  for tool in memcheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 build/gpu/tests/fp4gap_device_tests \
      --gtest_brief=1 ${SANITIZE_FILTER:+--gtest_filter=$SANITIZE_FILTER} >"$out/sanitizer.log" 2>&1
    echo "== compute-sanitizer $tool: exit $? ($(grep -c 'ERROR SUMMARY: 0 errors' "$out/sanitizer.log") clean summaries)" \
      | tee -a "$out/commands.txt"
    tail -n 5 "$out/sanitizer.log" >>"$out/commands.txt"
  done
fi
exit $rc
