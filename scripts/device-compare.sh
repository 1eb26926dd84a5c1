#!/usr/bin/env bash
# On the GPU machine: the working tree ("main") against every tree that scripts/stage-branch.sh
# put under .branches/, in one call. Builds all of them at once (gpu preset), runs each branch's
# device tests (TEST_FILTER, a gtest filter; default all; TEST_TREES="main" tests the working
# tree instead, e.g. when the staged tree is the baseline), then each quoted fp4gap command on
# every build, alternating, and prints one line per row: the median of main, of each branch, and
# branch / main. Logs and CSVs go to $OUT.
#   TEST_FILTER='DecodeGemm.*' bash scripts/device-compare.sh "gemm --m 1,16 --n 2048 --k 6144 ..."
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out}"; mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
trees=(".")
for d in .branches/*/; do [ -f "$d/CMakePresets.json" ] && trees+=("${d%/}"); done
[ ${#trees[@]} -ge 2 ] || { echo "no staged branch under .branches/ (scripts/stage-branch.sh)"; exit 2; }
jobs=$(( $(nproc) / ${#trees[@]} )); [ $jobs -ge 1 ] || jobs=1
pids=()
for t in "${trees[@]}"; do
  name=$(basename "$(realpath "$t")"); [ "$t" = "." ] && name=main
  ( cd "$t" && cmake --preset gpu >/dev/null && cmake --build --preset gpu -j "$jobs" ) >"$out/build-$name.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do wait "${pids[$i]}" || { failed=1; echo "build failed: ${trees[$i]}"; tail -n 30 "$out/build-$(basename "$(realpath "${trees[$i]}")").log"; }; done
[ $failed = 0 ] || exit 1
echo "== built ${#trees[@]} trees ($SECONDS s)"
for t in "${trees[@]}"; do
  name=$(basename "$(realpath "$t")"); [ "$t" = "." ] && name=main
  case " ${TEST_TREES:-${trees[*]:1}} " in
    *" $name "* | *" $t "*) ;;
    *) continue ;;
  esac
  "$t/build/gpu/tests/fp4gap_device_tests" --gtest_brief=1 ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} \
    >"$out/tests-$name.log" 2>&1
  echo "== $name device tests: exit $? ($(grep -E '^\[  (PASSED|FAILED)  \]' "$out/tests-$name.log" | tr '\n' ' ')) ($SECONDS s)"
  grep -E 'FAILED|Failure|repro' "$out/tests-$name.log" | head -n 20
done
n=0
for args in "$@"; do
  n=$((n + 1))
  csvs=()
  for t in "${trees[@]}"; do
    name=$(basename "$(realpath "$t")"); [ "$t" = "." ] && name=main
    # shellcheck disable=SC2086
    "$t/build/gpu/fp4gap" $args --format csv --output "$out/cmp$n-$name.csv" >/dev/null 2>"$out/cmp$n-$name.err"
    csvs+=("$out/cmp$n-$name.csv")
  done
  echo "== fp4gap $args ($SECONDS s)"
  python3 - "${csvs[@]}" <<'PY'
import csv, os, sys
tables = []
for path in sys.argv[1:]:
    name = os.path.basename(path).split("-", 1)[1][:-4]
    rows = {}
    if os.path.exists(path):
        for r in csv.DictReader(open(path)):
            rows[(r["backend"], r["m"], r["n"], r["k"], r["a_format"], r["b_format"])] = r
    tables.append((name, rows))
names = [n for n, _ in tables]
print("backend m n k " + " ".join(f"{n}_us" for n in names) + " " + " ".join(f"{n}/main" for n in names[1:]))
for key, base in tables[0][1].items():
    def us(rows):
        r = rows.get(key)
        return float(r["median_us"]) if r and r["status"] == "passed" and r["median_us"] else None
    cells = [us(rows) for _, rows in tables]
    text = ["-" if c is None else f"{c:.2f}" for c in cells]
    ratios = ["-" if c is None or cells[0] is None else f"{c / cells[0]:.3f}" for c in cells[1:]]
    statuses = {rows.get(key, {}).get("status", "missing") for _, rows in tables}
    note = "" if statuses == {"passed"} else " (" + ",".join(sorted(statuses)) + ")"
    print(" ".join([key[0], key[1], key[2], key[3]] + text + ratios) + note)
PY
done
