#!/usr/bin/env bash
# /metrics after traffic (completions, streams, a cancelled stream) passes `promtool check metrics`
# (Debian package prometheus) and carries the series the dashboards read.
set -euo pipefail
tokenhost=$1
here=$2
source "$here/lib.sh"
command -v promtool >/dev/null || { echo "promtool is missing: run scripts/setup.sh"; exit 1; }
start_server "$tokenhost" "$here/../../manifests/default.toml"
for i in 1 2 3; do
  curl -sf "http://127.0.0.1:$gw/v1/completions" -d "{\"prompt\": \"hello $i\", \"max_tokens\": 8}" >/dev/null
done
curl -sfN "http://127.0.0.1:$gw/v1/completions" -d '{"prompt": "hi", "max_tokens": 8, "stream": true}' >/dev/null
curl -sf "$admin/metrics" > "$work/metrics.txt"
promtool check metrics < "$work/metrics.txt"
for series in tokenhost_time_to_first_token_seconds_bucket tokenhost_inter_token_latency_seconds_bucket \
    tokenhost_request_duration_seconds_bucket tokenhost_tokens_in_total tokenhost_tokens_out_total \
    tokenhost_sequences_running tokenhost_sequences_waiting tokenhost_kv_blocks_used tokenhost_kv_blocks_free \
    tokenhost_plugin_seconds_total; do
  grep -q "^$series{" "$work/metrics.txt" || { echo "missing series $series"; cat "$work/metrics.txt"; exit 1; }
done
grep -q '^tokenhost_plugin_seconds_total{engine="main",slot="attention",plugin="attention.cpu_flash",experiment="",arm=""}' "$work/metrics.txt" \
  || { echo "no time recorded for the attention plugin"; exit 1; }
grep -q '^tokenhost_time_to_first_token_seconds_count{engine="main",experiment="",arm=""} 4$' "$work/metrics.txt" \
  || { echo "expected 4 first tokens"; grep time_to_first "$work/metrics.txt"; exit 1; }
echo "metrics: promtool check passed"
kill -TERM $pid
wait $pid
pid=""
