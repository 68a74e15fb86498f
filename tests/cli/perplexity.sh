#!/usr/bin/env bash
# `tokenhost perplexity` against llama-perplexity's figures for the same files, text and context, and
# its KL divergence mode. The text (tests/data/stories.txt) is the project's own; llama.cpp's figures
# were recorded with llama.cpp 3f545becc's `llama-perplexity -m FILE -f tests/data/stories.txt -c N -b N`
# (its defaults otherwise: f16 KV): this test does not build llama.cpp.
set -euo pipefail
tokenhost=$1
here=$2
source "$here/lib.sh"
require_models "$here"
fail() { echo "FAIL: $*"; exit 1; }
text="$here/../data/stories.txt"

ppl() {  # ppl ARGS...: the PPL tokenhost perplexity --json prints
  "$tokenhost" perplexity -f "$text" --json "$@" 2> "$work/err.txt" > "$work/ppl.json" || { cat "$work/err.txt"; fail "perplexity $*"; }
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["ppl"]["value"])' "$work/ppl.json"
}
within() {  # within WHAT OURS THEIRS PERCENT
  python3 -c 'import sys; o,t,p=map(float,sys.argv[2:5]); sys.exit(0 if abs(o-t)<=t*p/100 else 1)' "$1" "$2" "$3" "$4" ||
    fail "$1: PPL $2, llama-perplexity's $3 (more than $4% apart)"
  echo "ok: $1: PPL $2, llama-perplexity $3"
}

within "stories260K -c 128" "$(ppl -m "$models/stories260K.gguf" -c 128)" 4.1080 1
within "stories260K -c 256" "$(ppl -m "$models/stories260K.gguf" -c 256)" 4.0505 1
within "stories260K -c 512" "$(ppl -m "$models/stories260K.gguf" -c 512)" 4.0801 1
within "stories260K q4_0 -c 256" "$(ppl -m "$models/stories260K-q4_0.gguf" -c 256)" 4.5104 1
# A synthetic model: make-model's file is the same bytes wherever it is written (seeded).
"$tokenhost" make-model --preset stories260K --seed 11 --scale 0.08 --type f32 "$work/synthetic.gguf" > /dev/null 2>&1
within "synthetic (make-model --preset stories260K --seed 11 --scale 0.08) -c 128" "$(ppl -m "$work/synthetic.gguf" -c 128)" 642.5351 1

# Chunking as llama-perplexity's: the whole chunks of --ctx tokens (BOS, then the text without its last
# newline), n_ctx / 2 - 1 tokens scored in each.
python3 - "$work/ppl.json" <<'PY' || fail "chunking: $(cat "$work/ppl.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["n_ctx"] == 128 and j["chunks"] == j["tokens"] // 128 and j["scored"] == j["chunks"] * 63, j
PY
"$tokenhost" perplexity -m "$models/stories260K.gguf" -f "$text" -c 256 --chunks 3 --json 2>/dev/null > "$work/three.json"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["chunks"]==3 and j["scored"]==3*127, j' "$work/three.json" ||
  fail "--chunks 3: $(cat "$work/three.json")"
echo "ok: chunks of --ctx, the second half of each scored, --chunks"

# KL divergence: a run against its own saved distributions moves nothing; q8_0 KV moves them a little;
# a 4-bit model more.
"$tokenhost" perplexity -m "$models/stories260K.gguf" -f "$text" -c 256 --kv-dtype f32 --kl-divergence-base "$work/base.bin" \
  > /dev/null 2> "$work/err.txt" || { cat "$work/err.txt"; fail "--kl-divergence-base"; }
[ -f "$work/base.bin" ] && [ ! -e "$work/base.bin.partial" ] || fail "no base file, or a partial one left"
kl() {  # kl ARGS...: "mean_kld same_top ppl ppl_base" of a run compared with base.bin
  "$tokenhost" perplexity -m "$models/stories260K.gguf" -f "$text" -c 256 --kl-divergence "$work/base.bin" --json "$@" 2> "$work/err.txt" \
    > "$work/kl.json" || { cat "$work/err.txt"; fail "--kl-divergence $*"; }
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); k=j["kl"]; print(k["kld"]["value"], k["same_top"]["value"], j["ppl"]["value"], k["ppl_base"]["value"])' "$work/kl.json"
}
read -r kld same p pbase <<<"$(kl --kv-dtype f32)"
python3 -c 'import sys; k,s,p,b=map(float,sys.argv[1:]); sys.exit(0 if k<1e-6 and s==1.0 and abs(p-b)<1e-3*b else 1)' "$kld" "$same" "$p" "$pbase" ||
  fail "the same run: KLD $kld, same top $same, PPL $p against $pbase"
echo "ok: the same run: KLD $kld, same top 100%"
read -r kld8 same8 _ _ <<<"$(kl --kv-dtype q8_0)"
python3 -c 'import sys; k,s=map(float,sys.argv[1:]); sys.exit(0 if 1e-5<k<0.02 and s>0.9 else 1)' "$kld8" "$same8" ||
  fail "q8_0 KV: KLD $kld8, same top $same8"
echo "ok: q8_0 KV: KLD $kld8, same top $same8"
"$tokenhost" perplexity -m "$models/stories260K-q4_0.gguf" -f "$text" -c 256 --kl-divergence "$work/base.bin" > "$work/q4.txt" 2>/dev/null ||
  fail "q4_0 against the f32 base"
grep -q "Mean    KLD" "$work/q4.txt" && grep -q "Same top p" "$work/q4.txt" || fail "the statistics table: $(cat "$work/q4.txt")"
echo "ok: a 4-bit model against the base: $(grep 'Mean    KLD' "$work/q4.txt")"

# Errors name what is wrong.
printf 'Once upon a time, there was a cat.\n' > "$work/short.txt"
expect_fail perplexity "needs 1024 at least" -m "$models/stories260K.gguf" -f "$work/short.txt" -c 512
expect_fail perplexity "past the model's context of 2048" -m "$models/stories260K.gguf" -f "$text" -c 4096
expect_fail perplexity "was saved from a context of 256" -m "$models/stories260K.gguf" -f "$text" -c 128 --kl-divergence "$work/base.bin"
expect_fail perplexity "not a file of saved distributions" -m "$models/stories260K.gguf" -f "$text" -c 256 --kl-divergence "$text"
head -c 1000 "$work/base.bin" > "$work/short.bin"
expect_fail perplexity "truncated or damaged" -m "$models/stories260K.gguf" -f "$text" -c 256 --kl-divergence "$work/short.bin"
expect_fail perplexity "no slot 'atention' here (did you mean 'attention'?)" -m "$models/stories260K.gguf" -f "$text" --set atention=attention.reference
expect_fail perplexity "attention.nope" -m "$models/stories260K.gguf" -f "$text" --set attention=attention.nope
# --set chooses a plugin and sets its keys: the reference attention gives the same perplexity.
within "stories260K -c 128, attention.reference" "$(ppl -m "$models/stories260K.gguf" -c 128 --set attention=attention.reference)" 4.1080 1
within "stories260K -c 128, kvcache.block_size=32" "$(ppl -m "$models/stories260K.gguf" -c 128 --set kvcache.block_size=32)" 4.1080 1

# Prompt log-probabilities through the API (echo with logprobs, max_tokens 0) sum to what the
# perplexity tool computes for the same tokens: chunk 0 of -c 128, its rows 64..126 scored.
"$tokenhost" perplexity -m "$models/stories260K.gguf" -f "$text" -c 128 --chunks 1 --json 2>/dev/null > "$work/one.json"
python3 - "$text" > "$work/text.txt" <<'PY'
import sys
t = open(sys.argv[1], encoding="utf-8").read()
sys.stdout.write(t[:-1] if t.endswith("\n") else t)
PY
"$tokenhost" tokenize -m "$models/stories260K.gguf" --bos --no-parse-special < "$work/text.txt" > "$work/ids.txt"
ids=$(python3 -c 'import sys; print(",".join(open(sys.argv[1]).read().split()[:128]))' "$work/ids.txt")
sed -e 's/^listen = .*/listen = "127.0.0.1:0"/' -e 's/^admin_listen = .*/admin_listen = "127.0.0.1:0"/' \
  <("$tokenhost" serve -m "$models/stories260K.gguf" --print-manifest 2>/dev/null) > "$work/ppl-serve.toml"
start_server "$tokenhost" "$work/ppl-serve.toml"
curl -s "http://127.0.0.1:$gw/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"prompt\": [$ids], \"echo\": true, \"logprobs\": 0, \"max_tokens\": 0}" > "$work/echo.json"
python3 - "$work/echo.json" "$work/one.json" <<'PY' || fail "echo logprobs: $(head -c 600 "$work/echo.json")"
import json, sys
answer, ppl = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
c = answer["choices"][0]
lp = c["logprobs"]["token_logprobs"]
assert len(lp) == 128 and lp[0] is None and c["finish_reason"] == "length", (len(lp), lp[0], c["finish_reason"])
assert answer["usage"]["completion_tokens"] == 0
total = -sum(lp[65:128])
assert abs(total - ppl["nll"]) <= 1e-3 * ppl["nll"], (total, ppl["nll"])
print("ok: echo logprobs of chunk 0: NLL %.5f, perplexity's %.5f" % (total, ppl["nll"]))
PY

# The echoed text's offsets: each token where its text starts in the choice's text (the first word's
# SentencePiece space is not in the prompt as sent).
curl -s "http://127.0.0.1:$gw/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "echo": true, "logprobs": 0, "max_tokens": 2}' > "$work/offsets.json"
python3 - "$work/offsets.json" <<'PY' || fail "echo offsets: $(cat "$work/offsets.json")"
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
text, lp = c["text"], c["logprobs"]
assert text.startswith("Once upon a time") and lp["tokens"][:5] == ["", " Once", " upon", " a", " time"], (text, lp["tokens"])
assert lp["text_offset"][:5] == [0, 0, 4, 9, 11], lp["text_offset"]
for tok, off in zip(lp["tokens"][2:], lp["text_offset"][2:]):
    assert text[off:off + len(tok)] == tok, (tok, off, text)
print("ok: echo's text offsets point at each token in the text")
PY

# --url: the same figure through the running server's API (its /tokenize, echo logprobs per chunk).
"$tokenhost" perplexity --url "http://127.0.0.1:$gw" -f "$text" -c 128 --json 2>"$work/err.txt" > "$work/url.json" ||
  { cat "$work/err.txt"; fail "perplexity --url"; }
python3 - "$work/url.json" <<'PY' || fail "--url: $(cat "$work/url.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert abs(j["ppl"]["value"] - 4.1080) <= 4.1080 * 0.01 and j["chunks"] == j["tokens"] // 128, j
print("ok: --url: PPL %.4f over %d chunks" % (j["ppl"]["value"], j["chunks"]))
PY
expect_fail perplexity "need the whole distributions" --url "http://127.0.0.1:$gw" -f "$text" -c 128 --kl-divergence "$work/base.bin"
expect_fail perplexity "--url" --url "http://127.0.0.1:$gw" -m "$models/stories260K.gguf" -f "$text"
expect_fail perplexity "-m FILE (in process) or --url" -f "$text"
