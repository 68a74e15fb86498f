#!/usr/bin/env bash
# `tokenhost tokenize`: stories260K's vocabulary on standard input; ids, --bos, --pieces and errors.
set -euo pipefail
tokenhost=$1
here=$2
source "$here/lib.sh"
require_models "$here"
fail() { echo "FAIL: $*"; exit 1; }
model="$models/stories260K.gguf"

ids=$(printf 'Once upon a time' | "$tokenhost" tokenize -m "$model")
[[ "$ids" =~ ^[0-9]+( [0-9]+)*$ ]] || fail "ids: '$ids'"
for id in $ids; do [ "$id" -lt 512 ] || fail "id $id outside stories260K's 512 tokens"; done
with_bos=$(printf 'Once upon a time' | "$tokenhost" tokenize -m "$model" --bos)
[ "$with_bos" = "1 $ids" ] || fail "--bos gave '$with_bos', expected '1 $ids'"
pieces=$(printf 'Once upon a time' | "$tokenhost" tokenize -m "$model" --pieces)
[ "$(wc -l <<<"$pieces")" = "$(wc -w <<<"$ids")" ] || fail "--pieces gave $(wc -l <<<"$pieces") lines for $(wc -w <<<"$ids") ids"
[ "$(tr -d '\n' <<<"$pieces")" = " Once upon a time" ] || fail "--pieces joined: '$(tr -d '\n' <<<"$pieces")'"
# BOS is a control token: no text, so --pieces shows its vocabulary entry rather than an empty line.
[ "$(printf 'Once' | "$tokenhost" tokenize -m "$model" --bos --pieces | head -1)" = "<s>" ] || fail "--bos --pieces: BOS not shown as <s>"
# Special tokens: parsed by default, plain text on request.
[ "$(printf '<s>' | "$tokenhost" tokenize -m "$model")" = "1" ] || fail "<s> is not token 1"
[ "$(printf '<s>' | "$tokenhost" tokenize -m "$model" --no-parse-special)" != "1" ] || fail "--no-parse-special parsed <s>"
echo "ok: ids, --bos, --pieces, special tokens"

set +e
out=$(printf 'x' | "$tokenhost" tokenize -m "$here/lib.sh" 2>&1); rc=$?
set -e
[ $rc -eq 1 ] && grep -q "lib.sh" <<<"$out" || fail "a file that is not GGUF: $rc $out"
echo "ok: $out"
echo "tokenize behaves"
