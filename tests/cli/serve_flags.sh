#!/usr/bin/env bash
# serve's llama-server-style flags: each writes into the effective manifest (serve --print-manifest shows
# it, and the manifest reader checks it), a flag overrides the manifest, an unknown flag is refused
# naming it and the nearest known one, -ngl says it means nothing here, and --log-level (before or after
# `serve`) beats the manifest's log_level.
set -euo pipefail
tokenhost=$1 here=$2
source "$here/lib.sh"

printed() {  # printed ARGS...: serve --print-manifest ARGS, into $work/m.toml
  "$tokenhost" serve --print-manifest "$@" > "$work/m.toml" 2> "$work/err.txt" || { cat "$work/err.txt"; echo "FAIL: serve $*"; exit 1; }
}
has() {  # has PATTERN: the printed manifest holds a line matching PATTERN (nested tables' indent dropped)
  sed 's/^ *//' "$work/m.toml" | grep -qE -- "$1" || { cat "$work/m.toml"; echo "FAIL: no line /$1/"; exit 1; }
  echo "ok: $1"
}

printed -c 256 --kv-dtype q8_0 --api-key sk-cli-test-0123456789 --api-key sk-cli-test-abcdefghij -t 1 --kvcache prefix \
  --spec ngram --parallel 8 --host 127.0.0.2 --port 9999 --admin-port 9998
has '^context_len = 256$'
has '^kv_dtype = .q8_0.$'
has '^api_keys = \[ .sk-cli-test-0123456789., .sk-cli-test-abcdefghij. \]$'
has '^compute_threads = 1$'
has '^plugin = .kvcache.prefix.$'
has '^\[engines\.main\.spec_decode\]$'
has '^plugin = .spec_decode.ngram.$'
has '^max_step_seqs = 8$'
has '^listen = .127.0.0.2:9999.$'
has '^admin_listen = .127.0.0.1:9998.$'
# The printed manifest is one serve (and check) accepts as it is.
"$tokenhost" --log-level warn check --no-load "$work/m.toml"
# -np and --max-seqs are --parallel.
printed -np 3 && has '^max_step_seqs = 3$'
printed --max-seqs 5 && has '^max_step_seqs = 5$'

# -m replaces the model; --draft-model adds [models.draft] and the draft proposer reading it.
"$tokenhost" make-model "$work/tiny.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 300 --seed 3 > /dev/null 2>&1
printed -m "$work/tiny.gguf" --draft-model "$work/tiny.gguf"
has '^\[models\.tiny\]$'
has "^path = .$work/tiny.gguf.$"
has '^\[models\.draft\]$'
has '^plugin = .spec_decode.draft.$'
has '^\[engines\.main\.spec_decode\.config\]$'
has '^model = .draft.$'
"$tokenhost" --log-level warn check --no-load "$work/m.toml"

# A flag's value is checked as the manifest's would be, naming the key.
expect_fail serve "kv_dtype 'q9' in [engines.main] is not one of" --print-manifest --kv-dtype q9
expect_fail serve "--draft-model is the draft model of --spec draft, not of --spec ngram" --print-manifest --spec ngram --draft-model "$work/tiny.gguf"
# An unknown flag is refused naming it (its value never taken for the manifest's path).
set +e
"$tokenhost" serve --ctx-sise 256 > "$work/out.txt" 2> "$work/err.txt"; rc=$?
set -e
[ $rc = 2 ] && grep -qF "serve has no option --ctx-sise (did you mean --ctx-size?)" "$work/err.txt" || { cat "$work/err.txt"; echo "FAIL: unknown flag: $rc"; exit 1; }
echo "ok: unknown flag refused"
# -ngl is accepted and said to mean nothing here.
printed -ngl 99
grep -q "n-gpu-layers 99 means nothing here" "$work/err.txt" || { cat "$work/err.txt"; echo "FAIL: -ngl said nothing"; exit 1; }
echo "ok: -ngl"

# --log-level beats the manifest's log_level = "info", before `serve` and after it.
printed && has '^log_level = .info.$'
"$tokenhost" --log-level error serve --print-manifest > "$work/m.toml" && has '^log_level = .error.$'
printed --log-level warn && has '^log_level = .warn.$'
sed -e 's/^listen = .*/listen = "127.0.0.1:0"/' -e 's/^admin_listen = .*/admin_listen = "127.0.0.1:0"/' "$here/../../manifests/default.toml" > "$work/serve.toml"
"$tokenhost" --log-level error serve "$work/serve.toml" > "$work/log" 2>&1 &
pid=$!
sleep 2
kill -TERM $pid; wait $pid || true
pid=""
if grep -q "\[info\]" "$work/log"; then cat "$work/log"; echo "FAIL: info lines under --log-level error"; exit 1; fi
echo "ok: --log-level error serve prints no info line"
# -t sets the compute pool's threads (the start-up line says how many).
"$tokenhost" serve --port 0 --admin-port 0 -t 1 > "$work/log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "engine main ready" "$work/log" && break; sleep 0.1; done
kill -TERM $pid; wait $pid || true
pid=""
grep -q ": 1 compute threads for the engines without a partition" "$work/log" || { cat "$work/log"; echo "FAIL: -t 1"; exit 1; }
echo "ok: -t 1"
# The start-up log states the KV pool's size (stories260K: 5 layers x 4 KV heads x 8 x K and V in f16).
grep -qF "f16 KV cache of 1024 blocks of 16 positions (16384 positions, 10.0 MiB)" "$work/log" || { cat "$work/log"; echo "FAIL: KV pool size"; exit 1; }
echo "ok: KV pool size in the log"

# -a/--alias (--served-model-name): the name /v1/models lists and responses carry; requests may give it
# or the manifest's name. An alias that is another model's name is refused.
require_models "$here"
printed -m "$models/stories260K.gguf" --alias my-llama
has "^aliases = \[ 'my-llama' \]$"
"$tokenhost" serve -m "$models/stories260K.gguf" --alias my-llama --print-manifest 2>/dev/null > "$work/alias.toml"
start_server "$tokenhost" "$work/alias.toml"
curl -s "http://127.0.0.1:$gw/v1/models" > "$work/models.json"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert [m["id"] for m in j["data"]] == ["my-llama"], j' "$work/models.json" ||
  { cat "$work/models.json"; echo "FAIL: /v1/models with an alias"; exit 1; }
for name in my-llama stories260K; do
  curl -s "http://127.0.0.1:$gw/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"$name\", \"prompt\": \"Once\", \"max_tokens\": 2}" > "$work/answer.json"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["model"] == "my-llama" and j["usage"]["completion_tokens"] == 2, j' "$work/answer.json" ||
    { cat "$work/answer.json"; echo "FAIL: a request naming $name"; exit 1; }
done
echo "ok: --alias: /v1/models lists my-llama; requests naming it or stories260K are answered as my-llama"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
printf '[models.a]\naliases = ["b"]\n[models.b]\n[engines.main]\nmodel = "a"\nattention = { plugin = "attention.reference" }\nkvcache = { plugin = "kvcache.paged" }\nscheduler = { plugin = "scheduler.fifo" }\n' > "$work/clash.toml"
expect_fail check "alias 'b' of [models.a] is already a name of [models.b]" --no-load "$work/clash.toml"
