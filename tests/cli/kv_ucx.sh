#!/usr/bin/env bash
# KV blocks between two server processes over UCX (kv_connector.ucx, tls "tcp,sm"): server A's engine
# sends every prompt block it computes to server B's listener; B answers the same prompt from those
# blocks (a hit in its admin status, blocks loaded, the same greedy text) instead of computing it, and
# its /metrics count the load; with B gone, A keeps answering and names B in its status.
set -euo pipefail
tokenhost=$1 here=$2
source "$here/lib.sh"
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

port=$((20000 + RANDOM % 20000))
manifest() {  # manifest CONNECTOR_CONFIG > FILE
  stories_manifest_head
  cat <<TOML

[engines.main]
model = "stories"
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.prefix", config = { block_size = 16, n_blocks = 256 } }
scheduler = { plugin = "scheduler.fifo" }

[[engines.main.kv_connector]]
plugin = "kv_connector.ucx"
config = { tls = "tcp,sm", $1 }
TOML
}
layer() {  # layer ADMIN FIELD: the engine's first kv_connector layer's FIELD in admin status
  "$tokenhost" admin --url "$1" --json status > "$work/status.json"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["engines"][0]["kv_connectors"]["layers"][0][sys.argv[2]])' "$work/status.json" "$2"
}

manifest "listen = \"127.0.0.1:$port\"" > "$work/b.toml"
manifest "peers = \"127.0.0.1:$port\", timeout_ms = 500" > "$work/a.toml"
serve_named b "$work/b.toml"
grep -q "receiving blocks on 127.0.0.1:$port" "$work/b.log" || { echo "FAIL: B does not say where it receives"; cat "$work/b.log"; exit 1; }
serve_named a "$work/a.toml"

prompt="Once upon a time there was a little girl named Lily who loved to play in the park with her dog and her friends every day"
text_a=$(complete_text "$gw_a" "$prompt")
saved=$(layer "$admin_a" saved_blocks)
[ "$saved" -ge 1 ] || { echo "FAIL: A saved no blocks"; cat "$work/status.json"; exit 1; }
stored_b=$(layer "$admin_b" stored_blocks)
[ "$stored_b" -ge "$saved" ] || { echo "FAIL: B holds $stored_b blocks, A sent $saved"; exit 1; }
echo "ok: A's $saved prompt blocks are stored at B"

text_b=$(complete_text "$gw_b" "$prompt")
[ -n "$text_a" ] && [ "$text_a" = "$text_b" ] || { echo "FAIL: B answered '$text_b', A '$text_a'"; exit 1; }
[ "$(layer "$admin_b" hits)" = 1 ] || { echo "FAIL: B did not load the prompt from A's blocks"; cat "$work/status.json"; exit 1; }
loaded=$(layer "$admin_b" loaded_blocks)
[ "$loaded" -ge 1 ] || { echo "FAIL: B loaded no blocks"; exit 1; }
# Read whole first: `grep -q` leaving a pipe early fails curl's side of it under pipefail.
curl -s "$admin_b/metrics" "${auth[@]}" > "$work/metrics.txt"
grep -q 'tokenhost_kv_connector_loaded_blocks_total{.*connector="kv_connector.ucx".*} '"$loaded" "$work/metrics.txt" ||
  { echo "FAIL: B's /metrics do not count $loaded loaded blocks"; grep kv_connector "$work/metrics.txt"; exit 1; }
echo "ok: B answers the same prompt from the $loaded blocks A sent (same text, a hit, counted in /metrics)"

kill -9 "${pids[0]}"
text=$(complete_text "$gw_a" "Lily and Tom went to the park to see the ducks and the big old tree by the pond near the school")
[ -n "$text" ] || { echo "FAIL: A stopped answering with B gone"; exit 1; }
for _ in $(seq 50); do [ "$(layer "$admin_a" save_failures)" -ge 1 ] && break; sleep 0.1; done
[[ "$(layer "$admin_a" last_failure)" == *"127.0.0.1:$port"* ]] || { echo "FAIL: A's status does not name B"; cat "$work/status.json"; exit 1; }
echo "ok: with B gone A answers, and its status names B in the failed save"
