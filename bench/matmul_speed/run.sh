#!/usr/bin/env bash
# GMAC/s of the matmul kernel sets side by side, at 1 and 2 threads. Usage: bench/matmul_speed/run.sh
# [BUILD_DIR] [extra bench_matmul_speed options...]; prints markdown tables for bench/RESULTS.md.
set -euo pipefail
build=${1:-build}
shift || true
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%F)"
for threads in 1 2; do
  TOKENHOST_THREADS=$threads "$build/bin/bench_matmul_speed" "$@"
done
