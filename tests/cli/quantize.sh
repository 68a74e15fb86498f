#!/usr/bin/env bash
# `tokenhost quantize`: stories260K to q8_0 (its 172-wide feed-forward listed as kept) that then generates
# the documented story's opening, the K-quants keeping every tensor of it with a warning, and clear errors.
set -euo pipefail
tokenhost=$1
here=$2
source "$here/lib.sh"
require_models "$here"
fail() { echo "FAIL: $*"; exit 1; }
documented=$(cat "$models/stories260K.once-upon-a-time.greedy256.txt")

"$tokenhost" quantize "$models/stories260K.gguf" "$work/q8.gguf" --type q8_0 > "$work/out.txt" 2> "$work/err.txt" ||
  { cat "$work/err.txt"; fail "quantize exited $?"; }
grep -q '^kept in f32, its rows of 172 elements are not a multiple of the q8_0 block (32):$' "$work/out.txt" ||
  { cat "$work/out.txt"; fail "the 172-wide tensors are not listed as kept"; }
grep -q '^  blk.0.ffn_down.weight$' "$work/out.txt" || fail "blk.0.ffn_down.weight is not listed"
grep -qE "q8.gguf: [0-9]+ of [0-9]+ matrices quantized to q8_0, [0-9]+ kept; [0-9]+ one-dimensional" "$work/out.txt" ||
  { cat "$work/out.txt"; fail "no summary line"; }
grep -q 'quantizing tensors: 100%' "$work/err.txt" || fail "no progress on stderr"
# Not a terminal: a line per quarter, no carriage return (a log file stays readable).
! grep -q $'\r' "$work/err.txt" || fail "carriage returns in a non-terminal log"
[ "$(grep -c '^quantizing tensors: ' "$work/err.txt")" = 5 ] || fail "progress lines: $(grep '^quantizing' "$work/err.txt")"
echo "ok: q8_0 copy written, the 172-wide feed-forward kept and listed"

"$tokenhost" generate -m "$work/q8.gguf" -p "Once upon a time" -n 60 --temperature 0 > "$work/text.txt" 2> "$work/err.txt" ||
  { cat "$work/err.txt"; fail "generate on the q8_0 copy exited $?"; }
text="Once upon a time$(cat "$work/text.txt")"
same=0
while [ $same -lt ${#text} ] && [ "${text:$same:1}" = "${documented:$same:1}" ]; do same=$((same + 1)); done
echo "q8_0 copy's greedy text agrees with the f32 model's for its first $same of ${#text} characters"
[ $same -ge 40 ] || fail "the q8_0 copy's text departs from the f32 model's after $same characters: '$text'"
echo "ok: the q8_0 copy generates the documented story's opening"

"$tokenhost" quantize "$models/stories260K.gguf" "$work/k.gguf" --type q4_K > "$work/out.txt" 2> "$work/err.txt"
grep -q "no matrix of this model fits q4_K's blocks" "$work/err.txt" || { cat "$work/err.txt"; fail "no warning for q4_K"; }
grep -q 'multiple of the q4_K block (256)' "$work/out.txt" || fail "the kept tensors are not listed for q4_K"
echo "ok: q4_K keeps every tensor of stories260K, listed, with a warning"

expect_fail quantize "is not one of q8_0, q4_0, q4_K, q6_K" "$models/stories260K.gguf" "$work/x.gguf" --type f16
expect_fail quantize "is the input" "$work/q8.gguf" "$work/q8.gguf" --type q4_0
expect_fail quantize "does not exist" "$work/none.gguf" "$work/x.gguf" --type q8_0
expect_fail quantize "$work/no/such/dir/x.gguf" "$models/stories260K.gguf" "$work/no/such/dir/x.gguf" --type q8_0
[ ! -e "$work/x.gguf" ] || fail "a refused quantize left a file"
echo "quantize: all checks passed"
