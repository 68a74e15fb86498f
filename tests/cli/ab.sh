#!/usr/bin/env bash
# A/B experiments end to end on manifests/ab_schedulers.toml: `tokenhost check` accepts it and locates
# a broken experiment; traffic splits by session; `tokenhost admin ab` lists, reports (table and
# --json), changes the split, refuses a bad change, stops; /metrics labels engine series by arm and
# passes `promtool check metrics`.
set -euo pipefail
tokenhost=$1
here=$2
source "$here/lib.sh"
manifest="$here/../../manifests/ab_schedulers.toml"
command -v promtool >/dev/null || { echo "promtool is missing: run scripts/setup.sh"; exit 1; }

$tokenhost --log-level warn check --no-load "$manifest" >/dev/null
sed 's/percent = 50, holdback/percent = 40, holdback/' "$manifest" > "$work/sum.toml"
if $tokenhost --log-level warn check --no-load "$work/sum.toml" 2> "$work/err"; then echo "FAIL: percents summing to 90 accepted"; exit 1; fi
grep -qE "sum.toml:[0-9]+:[0-9]+: \[experiments.sched\] arms: the arms' percents sum to 90" "$work/err" || { cat "$work/err"; exit 1; }
sed 's/engine = "continuous"/engine = "continous"/' "$manifest" > "$work/engine.toml"
if $tokenhost --log-level warn check --no-load "$work/engine.toml" 2> "$work/err"; then echo "FAIL: unknown engine accepted"; exit 1; fi
grep -qE "engine.toml:[0-9]+:[0-9]+: .*arms\[1\].engine: arm 'b': no engine 'continous' \(did you mean 'continuous'\?\)" "$work/err" || { cat "$work/err"; exit 1; }
echo "ok: check locates experiment errors"

start_server "$tokenhost" "$manifest"
admin_cmd() { $tokenhost admin --url "$admin" "$@"; }
for i in $(seq 1 40); do
  curl -sf "http://127.0.0.1:$gw/v1/completions" -H "X-Session-Key: s$i" -d "{\"prompt\": \"hello $i\", \"max_tokens\": 4}" >/dev/null
done
curl -sf "http://127.0.0.1:$gw/v1/completions" -d '{"prompt": "hi", "max_tokens": 2, "tokenhost": {"arm": "b"}}' >/dev/null
status=$(curl -s -o "$work/out" -w '%{http_code}' "http://127.0.0.1:$gw/v1/completions" -d '{"prompt": "hi", "tokenhost": {"arm": "c"}}')
[ "$status" = 400 ] && grep -q '"param":"tokenhost.arm"' "$work/out" || { echo "FAIL: unknown arm -> $status"; cat "$work/out"; exit 1; }

admin_cmd ab list | tee "$work/list"
grep -qE "^sched +running +session +a=static 50%, b=continuous 50% \(not batch\)" "$work/list"
admin_cmd ab report sched | tee "$work/report"
grep -qE "^a +static +50 +[0-9]+ +0 " "$work/report"
grep -qE "^ttft_s +b vs a " "$work/report"
grep -qE "drafts kept +prefix hits$" "$work/report"  # neither arm speculates nor caches prefixes: "-"
grep -qE "^b +continuous .* +- +-$" "$work/report"
admin_cmd --json ab report sched > "$work/report.json"
python3 - "$work/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
arms = r["arms"]
assert [a["name"] for a in arms] == ["a", "b"], arms
assert sum(a["requests"] for a in arms) == 40, arms
assert arms[1]["chosen"] == 1, arms[1]
for a in arms:
    assert a["ttft_s"]["n"] == a["requests"], a
    assert a["load"]["steps"] > 0 and a["load"]["tokens_per_step"] >= 1, a  # the arm's engine stepped
assert {c["metric"] for c in r["comparisons"]} == {"ttft_s", "itl_s", "e2e_s"}, r["comparisons"]
PY
if admin_cmd ab set sched --arm a=70 2> "$work/err"; then echo "FAIL: a split summing to 120 accepted"; exit 1; fi
grep -q "sum to 120" "$work/err" || { cat "$work/err"; exit 1; }
admin_cmd ab set sched --arm a=80 --arm b=20 | grep -q "a 80%, b 20%"

curl -sf "$admin/metrics" > "$work/metrics.txt"
promtool check metrics < "$work/metrics.txt"
grep -q '^tokenhost_tokens_out_total{engine="static",experiment="sched",arm="a"}' "$work/metrics.txt" || { grep tokens_out "$work/metrics.txt"; exit 1; }
grep -q '^tokenhost_tokens_out_total{engine="continuous",experiment="sched",arm="b"}' "$work/metrics.txt"
admin_cmd ab stop sched | grep -q "stopped"
admin_cmd ab list | grep -qE "^sched +stopped"
curl -sf "$admin/metrics" | grep -q '^tokenhost_tokens_out_total{engine="static",experiment="",arm=""}'
echo "ab: ok"
kill -TERM $pid
wait $pid
pid=""
