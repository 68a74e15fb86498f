#!/usr/bin/env bash
# `tokenhost generate`: stories260K's greedy text on stdout (the documented one, with an f16 and an f32
# KV cache), the speed summary and log on stderr only, log-probabilities, an MoE model (its moe
# plugin picked for it), and clear errors for bad options.
set -euo pipefail
tokenhost=$1
here=$2
source "$here/lib.sh"
require_models "$here"
fail() { echo "FAIL: $*"; exit 1; }
documented=$(cat "$models/stories260K.once-upon-a-time.greedy256.txt")

for kv in f16 f32; do
  "$tokenhost" generate -m "$models/stories260K.gguf" -p "Once upon a time" -n 60 --temperature 0 --kv-dtype $kv \
    > "$work/out.txt" 2> "$work/err.txt" || { cat "$work/err.txt"; fail "generate exited $?"; }
  text="Once upon a time$(cat "$work/out.txt")"
  [ ${#text} -gt 100 ] || fail "only '$text' was generated"
  [[ "$documented" == "$text"* ]] || fail "the $kv KV cache's greedy text is not the documented one: '$text'"
  grep -q '^prefill: [0-9]* tokens in' "$work/err.txt" || fail "no prefill summary on stderr"
  grep -q '^decode: 60 tokens in' "$work/err.txt" || fail "no decode summary on stderr"
  grep -q 'loaded plugin attention.cpu_flash' "$work/err.txt" || fail "the log is not on stderr"
  if grep -q 'loaded plugin\|decode:' "$work/out.txt"; then fail "log or summary lines on stdout"; fi
  echo "ok: greedy text with an $kv KV cache is the documented one; summary and log on stderr"
done

"$tokenhost" generate -m "$models/stories260K.gguf" -p "Once upon a time" -n 5 --temperature 0.8 --seed 3 --logprobs 2 \
  > "$work/out.txt" 2> "$work/err.txt"
# Each line: the token's id, its text quoted and its log-probability, then the top 2 the same way.
[ "$(grep -c '^\[[0-9]* "[^"]*" -[0-9.]* | [0-9]* "[^"]*" -[0-9.]* [0-9]* "[^"]*" -[0-9.]*\]$' "$work/err.txt")" = 5 ] ||
  { cat "$work/err.txt"; fail "not one log-probability line with the top 2 per token"; }
# The sampled tokens' texts, joined, are what stdout shows.
[ "$(grep -E '^\[[0-9]+ "' "$work/err.txt" | sed -E 's/^\[[0-9]+ "([^"]*)".*/\1/' | tr -d '\n')" = "$(tr -d '\n' < "$work/out.txt")" ] ||
  { cat "$work/err.txt" "$work/out.txt"; fail "the log-probability lines' texts are not the generated text"; }
echo "ok: --logprobs 2 prints each token's text and log-probability and its top 2"

"$tokenhost" make-model "$work/moe.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 32 --vocab 300 \
  --experts 4 --experts-used 2 --seed 1 --type q8_0 > /dev/null 2>&1
"$tokenhost" generate -m "$work/moe.gguf" -p "hello" -n 8 > "$work/out.txt" 2> "$work/err.txt" ||
  { cat "$work/err.txt"; fail "generate on an MoE model exited $?"; }
grep -q "4 experts per layer, 2 used per token: moe.topk (weights = model; the model's top-k weights are renormalized), q8_0 experts" "$work/err.txt" ||
  { cat "$work/err.txt"; fail "no moe plugin chosen"; }
grep -q '^decode: 8 tokens in' "$work/err.txt" || fail "the MoE model did not generate 8 tokens"
echo "ok: a q8_0 MoE model generates through moe.topk"

# Qwen2-MoE's gating keeps the softmax probabilities: the file's architecture says so, not a flag.
"$tokenhost" make-model "$work/qwen2moe.gguf" --arch qwen2moe --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 32 \
  --vocab 300 --experts 4 --experts-used 2 --shared-experts 1 --shared-gate --seed 1 --type q4_0 > /dev/null 2>&1
"$tokenhost" generate -m "$work/qwen2moe.gguf" -p "hello" -n 4 > "$work/out.txt" 2> "$work/err.txt" ||
  { cat "$work/err.txt"; fail "generate on a qwen2moe model exited $?"; }
grep -q "moe.topk (weights = model; the model's top-k weights are its softmax probabilities), q4_0 experts" "$work/err.txt" ||
  { cat "$work/err.txt"; fail "qwen2moe's gating not taken from the model"; }
echo "ok: a q4_0 qwen2moe model generates, its gating taken from its architecture"

# An 8-bit KV cache generates too (its text may part from the documented one: 8 bits per element).
"$tokenhost" generate -m "$models/stories260K.gguf" -p "Once upon a time" -n 60 --temperature 0 --kv-dtype q8_0 \
  > "$work/out.txt" 2> "$work/err.txt" || { cat "$work/err.txt"; fail "generate --kv-dtype q8_0 exited $?"; }
grep -q '^decode: 60 tokens in' "$work/err.txt" || { cat "$work/err.txt"; fail "q8_0 KV: no 60 tokens"; }
echo "ok: generate --kv-dtype q8_0"
expect_fail generate "--kv-dtype" -m "$models/stories260K.gguf" -p hi --kv-dtype q4_0
expect_fail generate "does not exist" -m "$work/none.gguf" -p hi
expect_fail generate "--block-size" -m "$models/stories260K.gguf" -p hi --block-size 0
expect_fail generate "moe.nothing" -m "$work/moe.gguf" -p hi --moe moe.nothing
expect_fail generate "--moe-weights" -m "$work/moe.gguf" -p hi --moe-weights maybe
echo "generate: all checks passed"
