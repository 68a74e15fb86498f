#!/usr/bin/env bash
# Quantized MoE models side by side with llama.cpp on the same GGUF files, then the grouped experts'
# gain over a loop over tokens. Two shapes written by `tokenhost make-model` (once, into MODEL_DIR):
#   8x   Mixtral-shaped: llama attention, 8 experts, 2 per token
#   64x  Qwen-MoE-shaped: qwen2moe, 64 experts, 8 per token, a gated shared expert
# each in Q8_0 and Q4_0. Per round (ROUNDS of them, the order of the two servers alternating):
# bench_model_speed (prefill of PREFILL tokens, decode of DECODE tokens) and, when LLAMA_BENCH names a
# llama-bench binary built by the reader (this repository does not build llama.cpp), llama-bench -p
# PREFILL -n DECODE on the same file with the same threads. Then batched decode of 1, 8 and 64
# sequences (bench_model_speed --batches) and bench_moe_experts on each file; last, expert parallelism
# over 2 partitions on a skewed load (bench_moe_experts --partitions 2).
# Usage: bench/moe/run.sh [BUILD_DIR] [MODEL_DIR]; THREADS=2 ROUNDS=3 PREFILL=512 DECODE=64.
set -euo pipefail
build=${1:-build}
models=${2:-/tmp/tokenhost-bench-models}
threads=${THREADS:-2} rounds=${ROUNDS:-3} prefill=${PREFILL:-512} decode=${DECODE:-64}
mkdir -p "$models"
make_model() {  # make_model NAME TYPE ARGS...
  local name=$1 type=$2
  shift 2
  [ -f "$models/$name.gguf" ] || "$build/bin/tokenhost" make-model "$models/$name.gguf" --type "$type" --seed 1 \
    --dim 512 --layers 8 --heads 8 --kv-heads 4 --vocab 8000 --context 2048 "$@" > /dev/null
}
files=()
for type in q8_0 q4_0; do
  make_model "moe8x-$type" $type --experts 8 --experts-used 2 --ffn 1536
  make_model "moe64x-$type" $type --arch qwen2moe --experts 64 --experts-used 8 --ffn 256 --shared-experts 1 \
    --shared-ffn 1024 --shared-gate
  files+=("$models/moe8x-$type.gguf" "$models/moe64x-$type.gguf")
done
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%F), $threads threads"
ours() {  # ours FILE: "prefill decode" tokens/s
  TOKENHOST_THREADS=$threads "$build/bin/bench_model_speed" --runs 1 --prefill "$prefill" --decode "$decode" --model "$1" \
    2>/dev/null | awk -F'|' '/^\| .*gguf/ {gsub(/ /, "", $5); gsub(/ /, "", $6); print $5, $6}'
}
theirs() {  # theirs FILE: "prefill decode" tokens/s
  "$LLAMA_BENCH" -m "$1" -t "$threads" -p "$prefill" -n "$decode" -r 1 -o csv 2>/dev/null |
    awk -F, 'NR > 1 {gsub(/"/, ""); if ($0 ~ /,'"$prefill"',0,/) p = $(NF-1); else d = $(NF-1)} END {print p, d}'
}
declare -A results
for round in $(seq 1 "$rounds"); do
  for f in "${files[@]}"; do
    name=$(basename "$f" .gguf)
    if [ -n "${LLAMA_BENCH:-}" ] && [ $((round % 2)) = 0 ]; then
      results[$name-llama]+="$(theirs "$f");" results[$name-ours]+="$(ours "$f");"
    else
      results[$name-ours]+="$(ours "$f");"
      [ -z "${LLAMA_BENCH:-}" ] || results[$name-llama]+="$(theirs "$f");"
    fi
    last=${results[$name-ours]%;}
    echo "round $round $name: ours ${last##*;} (prefill, decode tok/s)" >&2
  done
done
median() { tr ';' '\n' | awk 'NF' | cut -d' ' -f"$1" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo
echo "| model | prefill $prefill tok/s, ours | llama.cpp | ratio | decode tok/s, ours | llama.cpp | ratio |"
echo "|---|---|---|---|---|---|---|"
for f in "${files[@]}"; do
  name=$(basename "$f" .gguf)
  op=$(median 1 <<< "${results[$name-ours]}") od=$(median 2 <<< "${results[$name-ours]}")
  if [ -n "${LLAMA_BENCH:-}" ]; then
    lp=$(median 1 <<< "${results[$name-llama]}") ld=$(median 2 <<< "${results[$name-llama]}")
    echo "| $name | $op | $lp | $(awk "BEGIN {printf \"%.2fx\", $op / $lp}") | $od | $ld | $(awk "BEGIN {printf \"%.2fx\", $od / $ld}") |"
  else
    echo "| $name | $op | - | - | $od | - | - |"
  fi
done
echo
for f in "${files[@]}"; do
  TOKENHOST_THREADS=$threads "$build/bin/bench_model_speed" --runs "$rounds" --prefill 16 --decode 8 --batches 1,8,64 \
    --batch-prompt 64 --batch-generate 16 --model "$f" 2>/dev/null | sed -n '/| batch |/,$p'
  TOKENHOST_THREADS=$threads "$build/bin/bench_moe_experts" --model "$f" --runs 7
  echo
done
# Expert parallelism: skewed routing over 2 partitions, the start placement against moe.eplb's, without
# and with 2 replicas (the Q8_0 files and the 64-expert Q4_0 one).
for f in "$models/moe64x-q8_0.gguf" "$models/moe8x-q8_0.gguf" "$models/moe64x-q4_0.gguf"; do
  for replicas in 0 2; do
    echo "$(basename "$f" .gguf), $replicas replicas:"
    TOKENHOST_THREADS=$threads "$build/bin/bench_moe_experts" --model "$f" --partitions 2 --replicas "$replicas" --skew 1.2 \
      --batches 8,64,256 --runs 21 | sed -n '/| tokens |/,$p'
  done
done
