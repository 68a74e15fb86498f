#!/usr/bin/env bash
# Makes the benchmark models with `tokenhost make-model` (once; they are large) and measures decode
# and prefill speed at 1 and 2 threads, memory bandwidth alongside, then batched decode of the 110M
# Q8_0 shape (1, 4 and 16 sequences of 128 + 128 tokens, as ANCHORS.md's llama-batched-bench figures). Usage: bench/model_speed/run.sh
# [BUILD_DIR] [MODEL_DIR]; prints markdown tables for bench/RESULTS.md. KERNELS=avx2,avx512vnni compares
# matmul kernel sets in the same runs.
set -euo pipefail
build=${1:-build}
models=${2:-/tmp/tokenhost-bench-models}
runs=${RUNS:-3}
mkdir -p "$models"
make_model() {  # make_model NAME PRESET TYPE
  [ -f "$models/$1.gguf" ] || "$build/bin/tokenhost" make-model "$models/$1.gguf" --preset "$2" --type "$3" --seed 1
}
make_model 110M-f32 110M f32
make_model 110M-f16 110M f16
make_model 110M-q8_0 110M q8_0
make_model 1.1B-q8_0 1.1B q8_0
make_model 1.1B-q4_0 1.1B q4_0
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%F)"
for threads in 1 2; do
  TOKENHOST_THREADS=$threads "$build/bin/bench_model_speed" --runs "$runs" ${KERNELS:+--kernels "$KERNELS"} \
    --model "$models/110M-f32.gguf" --model "$models/110M-f16.gguf" --model "$models/110M-q8_0.gguf" \
    ${SMALL_ONLY:+} $( [ -n "${SMALL_ONLY:-}" ] || echo --model "$models/1.1B-q8_0.gguf" --model "$models/1.1B-q4_0.gguf" )
done
for threads in 1 2; do
  TOKENHOST_THREADS=$threads "$build/bin/bench_model_speed" --runs "$runs" --prefill 16 --decode 8 --batches 1,4,16 \
    --model "$models/110M-q8_0.gguf" | sed -n '/| batch |/,$p'
done
