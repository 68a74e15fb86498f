#!/usr/bin/env bash
# One fuzz target as a CTest test: every input that once crashed it (fuzz/regressions/TARGET) runs
# first, then the fuzzer runs for SECONDS on its seed corpus (fuzz/corpus/TARGET, read only; what it
# finds goes to a work folder in the build tree). A crash fails the test and leaves its input under
# the build tree's fuzz/crashes/, to be added to fuzz/regressions/TARGET once fixed.
# Usage: run_fuzzer.sh FUZZER SOURCE_DIR BUILD_DIR TARGET SECONDS
set -euo pipefail
fuzzer=$1 source=$2 build=$3 target=$4 seconds=$5
work="$build/fuzz/work/$target"
crashes="$build/fuzz/crashes"
mkdir -p "$work" "$crashes"
regressions=("$source/fuzz/regressions/$target"/*)
if [ -e "${regressions[0]}" ]; then
  "$fuzzer" "${regressions[@]}" > "$work.regressions.log" 2>&1 || { cat "$work.regressions.log"; echo "FAIL: a regression input crashes $target again"; exit 1; }
  echo "ok: ${#regressions[@]} regression input(s)"
fi
"$fuzzer" "$work" "$source/fuzz/corpus/$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix="$crashes/$target-" -print_final_stats=1 > "$work.log" 2>&1 || {
  tail -60 "$work.log"; echo "FAIL: fuzz_$target crashed; its input is in $crashes"; exit 1; }
grep -E "^stat::number_of_executed_units|^Done" "$work.log" || true
echo "fuzz_$target: no crash in $seconds s"
