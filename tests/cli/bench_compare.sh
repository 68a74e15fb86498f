#!/usr/bin/env bash
# `tokenhost bench --repeat` and `tokenhost bench compare`: the odd and the even runs of a repeated
# bench of one server show no significant difference on any figure; with a known slowdown (the
# attention.flaky fixture sleeping in every forward call while a file exists) the figures it affects are
# called worse. Also the JSON of a repeated run, a one-run comparison (deltas without a test), and bad
# files.
set -euo pipefail
tokenhost=$1 here=$2 fixtures=$3
source "$here/lib.sh"
require_models "$here"
fail() { echo "FAIL: $*"; exit 1; }

cat > "$work/flaky.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "info"
plugin_paths = ["$fixtures/attention_flaky"]

[models.stories]
source = "gguf"
path = "$models/stories260K.gguf"

[engines.main]
model = "stories"
attention = { plugin = "attention.flaky", config = { slow_while = "$work/slow", slow_ms = 3 } }
kvcache = { plugin = "kvcache.paged", config = { block_size = 16, n_blocks = 256 } }
scheduler = { plugin = "scheduler.continuous" }
TOML
start_server "$tokenhost" "$work/flaky.toml"
url="http://127.0.0.1:$gw"
run() {  # run NAME SEED [REQUESTS] [REPEATS]: bench --repeat REPEATS (3) into NAME.json
  "$tokenhost" bench --url "$url" --repeat "${4:-3}" --requests "${3:-24}" --warmup 4 --concurrency 2 --prompt-tokens 16 --output-tokens 24 \
    --ignore-eos --seed "$2" --extra-body '{"temperature": 0}' --quiet --json "$work/$1.json" 2> "$work/$1.err" || { cat "$work/$1.err"; fail "bench $1"; }
}
# base has five runs: the slowdown below must be called even when one of them is disturbed.
run base 1 24 5
# The same server twice: one bench of six runs per workload (seed), its odd and its even runs compared
# (split below). Runs of two benches one after the other see whatever else the 2 cores run at the
# time: beside a busy process their medians moved by 30-45% between benches, where runs that alternate
# in one bench share it.
run pair1 1 24 6
run pair2 2 24 6
split() {  # split NAME: NAME.json's odd and even runs, as the figures compare reads, into NAME-a / NAME-b
  python3 - "$work/$1.json" "$work/$1-a.json" "$work/$1-b.json" <<'PY' || fail "splitting $1.json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["repeats"] == 6, j["repeats"]
for half, path in ((0, sys.argv[2]), (1, sys.argv[3])):
    figures = {name: {"values": f["values"][half::2]} for name, f in j["figures"].items()}
    json.dump({"repeats": 3, "figures": figures}, open(path, "w"))
PY
}
split pair1
split pair2
touch "$work/slow"
run slow 1 8 5
rm -f "$work/slow"

python3 - "$work/base.json" <<'PY' || fail "the repeated run's JSON: $(head -c 800 "$work/base.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["repeats"] == 5 and len(j["runs"]) == 5, j.keys()
f = j["figures"]["output_throughput"]
assert len(f["values"]) == 5 and min(f["values"]) <= f["median"] <= max(f["values"]), f
assert f["ci95"][0] <= f["ci95"][1], f
assert all(r["requests_ok"] == 24 for r in j["runs"])
print("ok: --repeat 5: output_throughput %s, median %.1f, 95%% [%.1f, %.1f]" % (f["values"], f["median"], *f["ci95"]))
PY

# The same server twice, for two workloads (seeds): nothing called. A change must be significant and at
# least 25% here: on a 2-core machine whose client shares the server's cores, runs of a fraction of a
# second each move by several percent, their p99 (of 24 requests: the slowest) by 10-30% (with a 10%
# bar, ttft_ms.p99 was called worse in two full suite runs). The slowdown below moves what it affects by
# 100% or more.
for pair in "pair1-a pair1-b" "pair2-a pair2-b"; do
  read -r a b <<<"$pair"
  "$tokenhost" bench compare "$work/$a.json" "$work/$b.json" --min-effect 25 > "$work/same.txt" || fail "compare"
  cat "$work/same.txt"
  grep -qE " (better|worse)$" "$work/same.txt" && fail "two runs of the same server differ significantly"
  [ "$(grep -c "no significant difference" "$work/same.txt")" = 9 ] || fail "not every figure tested"
  echo "ok: the same server twice ($a, $b): no significant difference"
done

"$tokenhost" bench compare "$work/base.json" "$work/slow.json" --json > "$work/slow-rows.json" || fail "compare --json"
"$tokenhost" bench compare "$work/base.json" "$work/slow.json"
python3 - "$work/slow-rows.json" <<'PY' || fail "the slowdown: $(cat "$work/slow-rows.json")"
import json, sys
rows = {r["figure"]: r for r in json.load(open(sys.argv[1]))}
# Every forward call sleeps 3 ms per layer (5 layers): each step takes 15 ms more, so every token
# comes later and fewer come per second.
for name in ["output_throughput", "itl_ms.p50", "e2e_latency_ms.p50", "per_request_output_throughput.p50"]:
    assert rows[name]["verdict"] == "worse", (name, rows[name])
assert rows["itl_ms.p50"]["delta"] > 1.0, rows["itl_ms.p50"]
assert all(r["verdict"] != "better" for r in rows.values()), rows
print("ok: the slowdown is called worse on throughput, ITL, end to end")
PY

# One run a side: deltas, no test.
"$tokenhost" bench --url "$url" --requests 4 --prompt-tokens 8 --output-tokens 4 --ignore-eos --quiet --json "$work/one.json"
"$tokenhost" bench compare "$work/one.json" "$work/base.json" > "$work/one.txt"
grep -q "one run: --repeat 3 or more to test" "$work/one.txt" || fail "one run: $(cat "$work/one.txt")"
echo "ok: one run: deltas without a test"
expect_fail bench "not JSON" compare "$work/flaky.toml" "$work/base.json"
echo '{"a": 1}' > "$work/other.json"
expect_fail bench "not a tokenhost bench --json file" compare "$work/other.json" "$work/base.json"
# The client shares the server's machine here: bench says so.
"$tokenhost" bench --url "$url" --requests 1 --prompt-tokens 4 --output-tokens 2 > /dev/null 2> "$work/warn.txt"
grep -q "the client runs on the server's machine" "$work/warn.txt" || fail "no warning about sharing the server's cores: $(cat "$work/warn.txt")"
echo "ok: the shared-cores warning"

# Prompt lengths in the served model's tokens (its /tokenize): stories260K spends about 2.6 tokens on a
# word; with --prompt-units tokens each prompt is exactly the length asked (the server adds its BOS).
"$tokenhost" bench --url "$url" --requests 3 --prompt-tokens 37 --output-tokens 2 --ignore-eos --quiet --json "$work/tok.json"
"$tokenhost" bench --url "$url" --requests 3 --prompt-tokens 37 --output-tokens 2 --ignore-eos --quiet --prompt-units words --json "$work/words.json"
python3 - "$work/tok.json" "$work/words.json" <<'PY' || fail "prompt units: $(cat "$work/tok.json")"
import json, sys
tok, words = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert tok["input_tokens_source"] == "server" and tok["input_tokens"] == 3 * 38, tok["input_tokens"]
assert tok["config"]["prompt_units"] == "tokens" and words["config"]["prompt_units"] == "words"
assert words["input_tokens"] > 3 * 60, words["input_tokens"]
print("ok: --prompt-tokens 37 is 37 tokens of the served model (+ BOS); 37 words are %d" % (words["input_tokens"] // 3))
PY
