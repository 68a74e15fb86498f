#!/usr/bin/env bash
# `serve --record FILE` writes a JSON line per finished request (no text unless --record-text), `bench
# --replay FILE` sends the recording again (arrival times, prompt and output lengths), and `bench
# --sweep NAME=V1,V2` runs the load against a server it starts for each value of a manifest key or a
# serve flag. Errors name what is wrong.
set -euo pipefail
tokenhost=$1 here=$2
source "$here/lib.sh"
require_models "$here"
fail() { echo "FAIL: $*"; exit 1; }

"$tokenhost" serve -m "$models/stories260K.gguf" --record "$work/traffic.jsonl" --print-manifest 2>/dev/null > "$work/rec.toml"
grep -q "record_traffic = '$work/traffic.jsonl'" "$work/rec.toml" || fail "--record is not [server] record_traffic: $(cat "$work/rec.toml")"
start_server "$tokenhost" "$work/rec.toml"
url="http://127.0.0.1:$gw"
grep -q "recording the traffic to $work/traffic.jsonl" "$work/log" || fail "no log line saying the traffic is recorded"
"$tokenhost" bench --url "$url" --rate 40 --requests 10 --prompt-tokens 10:60 --output-tokens 4:20 --ignore-eos --seed 3 --quiet
curl -s "$url/v1/chat/completions" -H 'Content-Type: application/json' -d '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}' > /dev/null
for _ in $(seq 50); do [ "$(wc -l < "$work/traffic.jsonl")" -ge 11 ] && break; sleep 0.1; done
python3 - "$work/traffic.jsonl" <<'PY' || fail "the recording: $(head -3 "$work/traffic.jsonl")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 11, len(lines)
for l in lines:
    assert set(l) == {"t", "route", "model", "stream", "n", "prompt_tokens", "max_tokens", "completion_tokens", "outcome", "ms"}, l
    assert l["outcome"] == "ok" and l["model"] == "stories260K" and l["t"] >= 0
assert [l["route"] for l in lines].count("chat") == 1 and [l["route"] for l in lines].count("completions") == 10
comp = [l for l in lines if l["route"] == "completions"]
assert all(11 <= l["prompt_tokens"][0] <= 61 and l["completion_tokens"][0] == l["max_tokens"][0] for l in comp), comp
print("ok: the recording: 11 lines, lengths and times, no text")
PY

# The replay sends the same lengths at the same pace (from a copy: the server records the replay too).
cp "$work/traffic.jsonl" "$work/recorded.jsonl"
"$tokenhost" bench --url "$url" --replay "$work/recorded.jsonl" --quiet --json "$work/replay.json" || fail "--replay"
python3 - "$work/recorded.jsonl" "$work/replay.json" <<'PY' || fail "the replay: $(head -c 600 "$work/replay.json")"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
j = json.load(open(sys.argv[2]))
assert j["config"]["mode"] == "replay" and j["requests_ok"] == len(lines), j["requests_ok"]
assert j["output_tokens"] == sum(l["completion_tokens"][0] for l in lines), (j["output_tokens"], [l["completion_tokens"] for l in lines])
want = sum(l["prompt_tokens"][0] for l in lines if l["route"] == "completions")
assert abs(j["input_tokens"] - want - 16) <= 4, (j["input_tokens"], want)  # the chat line replays as a completion
span = max(l["t"] for l in lines) - min(l["t"] for l in lines)
assert j["wall_time_s"] >= span * 0.9, (j["wall_time_s"], span)
print("ok: the replay: %d requests, %d output tokens, over %.2f s (recorded %.2f s)" % (j["requests_ok"], j["output_tokens"], j["wall_time_s"], span))
PY
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""

# With --record-text the prompts' text is kept, and a replay sends it.
"$tokenhost" serve -m "$models/stories260K.gguf" --record "$work/text.jsonl" --record-text --print-manifest 2>/dev/null > "$work/text.toml"
start_server "$tokenhost" "$work/text.toml"
curl -s "http://127.0.0.1:$gw/v1/completions" -H 'Content-Type: application/json' -d '{"prompt": "Once upon a time", "max_tokens": 2}' > /dev/null
for _ in $(seq 50); do [ -s "$work/text.jsonl" ] && break; sleep 0.1; done
grep -q '"prompts":\["Once upon a time"\]' "$work/text.jsonl" || fail "--record-text: $(cat "$work/text.jsonl")"
"$tokenhost" bench --url "http://127.0.0.1:$gw" --replay "$work/text.jsonl" --quiet --json "$work/text-replay.json"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["input_tokens"]==5 and j["output_tokens"]==2, j' "$work/text-replay.json" ||
  fail "the replayed text: $(cat "$work/text-replay.json")"
echo "ok: --record-text keeps the prompt; the replay sends it (5 tokens again)"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""

printf '{"t": 0}\n' > "$work/bad.jsonl"
expect_fail bench "bad.jsonl:1: no \"prompt_tokens\"" --url "http://127.0.0.1:1" --replay "$work/bad.jsonl"
printf '[server]\nrecord_text = true\n' > "$work/norec.toml"
expect_fail check "set record_traffic too" "$work/norec.toml"
expect_fail serve "cannot write /nonexistent-dir/t.jsonl" -m "$models/stories260K.gguf" --port 0 --admin-port 0 --record /nonexistent-dir/t.jsonl

# --sweep: a server per value of a manifest key, then of a serve flag. With one sequence a step, the
# running sequence keeps the step until it ends (decodes first), so the others' first tokens wait for
# its 64 tokens: 21-31 ms here, where 8 a step admit them at once (2-4 ms). With 8 tokens
# out the difference was a few milliseconds, and once, beside the rest of the suite, reversed.
"$tokenhost" bench --sweep engines.main.max_step_seqs=1,8 --requests 8 --concurrency 4 --prompt-tokens 16 --output-tokens 64 \
  --ignore-eos --quiet --json "$work/sweep.json" > "$work/sweep.txt" || { cat "$work/sweep.txt"; fail "--sweep of a key"; }
python3 - "$work/sweep.json" <<'PY' || fail "the sweep: $(head -c 600 "$work/sweep.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["sweep"]["name"] == "engines.main.max_step_seqs" and j["sweep"]["values"] == ["1", "8"], j["sweep"]
assert [r["sweep_value"] for r in j["results"]] == ["1", "8"] and all(r["requests_ok"] == 8 for r in j["results"])
# One sequence a step queues the others behind whole generations: the first tokens come later.
assert j["results"][0]["ttft_ms"]["p50"] > j["results"][1]["ttft_ms"]["p50"], [r["ttft_ms"]["p50"] for r in j["results"]]
print("ok: --sweep engines.main.max_step_seqs=1,8: TTFT p50 %.1f ms and %.1f ms" % tuple(r["ttft_ms"]["p50"] for r in j["results"]))
PY
grep -q "^8 " "$work/sweep.txt" || fail "the sweep's table: $(cat "$work/sweep.txt")"
"$tokenhost" bench --sweep=--kv-dtype=f16,q8_0 --requests 4 --prompt-tokens 8 --output-tokens 4 --ignore-eos --quiet > "$work/flag.txt" ||
  fail "--sweep of a flag"
grep -q "^q8_0 " "$work/flag.txt" || fail "the flag sweep's table: $(cat "$work/flag.txt")"
echo "ok: --sweep=--kv-dtype=f16,q8_0"
expect_fail bench "expected NAME=V1,V2" --sweep engines.main.max_step_seqs
expect_fail bench "--nope" --sweep=--nope=1,2 --requests 1
expect_fail bench "kv_dtype" --sweep engines.main.kv_dtype=f8 --requests 1
expect_fail bench "leave out --url" --url http://127.0.0.1:1 --sweep engines.main.max_step_seqs=1
# --serve's manifest: its relative paths mean what they mean beside it.
mkdir -p "$work/site" && cp "$models/stories260K.gguf" "$work/site/story.gguf"
"$tokenhost" serve -m "$models/stories260K.gguf" --print-manifest 2>/dev/null | sed "s|path = '.*'|path = 'story.gguf'|" > "$work/site/base.toml"
grep -q "path = 'story.gguf'" "$work/site/base.toml" || fail "the relative manifest: $(cat "$work/site/base.toml")"
"$tokenhost" bench --serve "$work/site/base.toml" --sweep engines.main.max_step_tokens=64,512 --requests 4 --prompt-tokens 8 \
  --output-tokens 4 --ignore-eos --quiet > "$work/rel.txt" || { cat "$work/rel.txt"; fail "--serve with a relative model path"; }
[ -z "$(ls -A "$work/site" | grep tokenhost-sweep)" ] || fail "the sweep left its manifests beside --serve's"
echo "ok: --serve's relative paths; nothing left beside it"
