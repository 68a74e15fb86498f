#!/usr/bin/env bash
# The actor, server and HTTP tests under ThreadSanitizer (not part of CI): see --help.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/tsan.sh [BUILD_DIR] [-- CTEST_ARGS...]

Configures BUILD_DIR (default: build-tsan in the repository root) with -DTOKENHOST_TSAN=ON
(ThreadSanitizer on every target, CUDA and the fuzz targets off), builds the test executable
test_tsan (the tests under tests/host/actors, tests/host/server and tests/host/http, less those
tagged [measured], linked against tokenhost_core) with the plugins and fixture plugins it loads, then
runs its tests (CTest label `tsan`) with

  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=tests/tsan/suppressions.txt"

A data race or other report fails the test case it happens in. Every suppression in
tests/tsan/suppressions.txt says why it is there; tests/tsan/caf_annotations.cpp tells TSan how
CAF (not instrumented) orders actors and messages. Arguments after `--` go to ctest
(e.g. `-- -R hot_swap`).

Time on a 2-core machine: under 10 minutes to build from scratch, about 3 to run the tests.
Environment: JOBS (build jobs, default 2).
EOF
}

root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-tsan"
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --) shift; ctest_args=("$@"); break ;;
    -*) echo "tsan.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) build="$(realpath -m "$1")"; shift ;;
  esac
done

cmake -S "$root" -B "$build" -DTOKENHOST_TSAN=ON -DTOKENHOST_SANITIZE=OFF -DTOKENHOST_WITH_CUDA=OFF \
  -DTOKENHOST_FUZZ_CXX=OFF >/dev/null
cmake --build "$build" -j"${JOBS:-2}" --target test_tsan

# halt_on_error: the first report ends the test case, which then fails. second_deadlock_stack: a
# lock-order report shows both acquisitions.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tests/tsan/suppressions.txt${TSAN_OPTIONS:+ $TSAN_OPTIONS}"
ctest --test-dir "$build" -L tsan --output-on-failure -j"${JOBS:-2}" "${ctest_args[@]}"
