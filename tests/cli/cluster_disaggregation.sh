#!/usr/bin/env bash
# Prefill/decode disaggregation across two nodes, the KV blocks carried by kv_connector.actor over the
# cluster's mutual-TLS link: the head runs the prefill engine (its connector's peer: decode@worker-1),
# worker-1 the decode engine; router.disaggregated on the head splits a long prompt between them. The
# answer is one engine's (greedy, a third server computes it alone); the head's engine saved the prompt
# blocks with no failed save (each save completes only once the worker's engine stored them and its
# answer came back over the link); the worker's engine loaded them (a hit) instead of computing them.
# A short prompt goes to the decode engine alone.
set -euo pipefail
tokenhost=$1 here=$2
source "$here/lib.sh"
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

"$tokenhost" cluster init "$work/certs" --nodes head,worker-1 > /dev/null
port=$((20000 + RANDOM % 20000))
engine() {  # engine NAME ROLE: an engine of stories260K with prefix caching
  cat <<TOML

[engines.$1]
model = "stories"
role = "$2"
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.prefix", config = { block_size = 16, n_blocks = 256 } }
scheduler = { plugin = "scheduler.fifo" }
TOML
}
{ stories_manifest_head; printf '\n[cluster]\nnode = "worker-1"\ncerts = "%s"\nlisten = "127.0.0.1:%s"\n' "$work/certs" "$port"
  engine decode decode; printf '\n[[engines.decode.kv_connector]]\nplugin = "kv_connector.actor"\n'; } > "$work/worker.toml"
{ stories_manifest_head; printf '\n[cluster]\nnode = "head"\ncerts = "%s"\nworkers = [{ name = "worker-1", address = "127.0.0.1:%s" }]\n' "$work/certs" "$port"
  engine prefill prefill
  printf '\n[[engines.prefill.kv_connector]]\nplugin = "kv_connector.actor"\nconfig = { peers = "decode@worker-1" }\n'
  printf '\n[router]\nplugin = "router.disaggregated"\nconfig = { min_prompt_tokens = 16 }\n'; } > "$work/head.toml"
{ stories_manifest_head; engine one both; } > "$work/one.toml"

layer() {  # layer ADMIN ENGINE FIELD: that engine's first kv_connector layer's FIELD in admin status
  "$tokenhost" admin --url "$1" --json status > "$work/status.json"
  python3 -c '
import json, sys
for e in json.load(open(sys.argv[1]))["engines"]:
    if e["name"] == sys.argv[2]:
        print(e["kv_connectors"]["layers"][0][sys.argv[3]])' "$work/status.json" "$2" "$3"
}

serve_named worker "$work/worker.toml"
serve_named head "$work/head.toml"
serve_named one "$work/one.toml"
for _ in $(seq 100); do grep -q "worker worker-1 joined" "$work/head.log" && break; sleep 0.1; done
grep -q "worker worker-1 joined" "$work/head.log" || { echo "FAIL: worker-1 did not join"; cat "$work/head.log"; exit 1; }
"$tokenhost" admin --url "$admin_head" --json status > "$work/status.json"
python3 -c 'import json,sys; e=[e for e in json.load(open(sys.argv[1]))["engines"] if e["name"]=="decode@worker-1"]; sys.exit(0 if e and e[0]["role"]=="decode" else 1)' "$work/status.json" ||
  { echo "FAIL: the head does not see decode@worker-1 as a decode engine"; cat "$work/status.json"; exit 1; }
echo "ok: the head routes to decode@worker-1, a decode engine"

prompt="Once upon a time there was a little girl named Lily who loved to play in the park with her dog and her friends every day"
expected=$(complete_text "$gw_one" "$prompt")
text=$(complete_text "$gw_head" "$prompt")
[ -n "$expected" ] && [ "$text" = "$expected" ] || { echo "FAIL: the split answer '$text', one engine's '$expected'"; cat "$work/head.log"; exit 1; }
saved=$(layer "$admin_head" prefill saved_blocks)
[ "$saved" -ge 1 ] || { echo "FAIL: the prefill engine saved no blocks"; cat "$work/status.json"; exit 1; }
[ "$(layer "$admin_head" prefill save_failures)" = 0 ] || { echo "FAIL: a save to decode@worker-1 failed"; cat "$work/status.json"; exit 1; }
[ "$(layer "$admin_worker" decode hits)" = 1 ] || { echo "FAIL: the decode engine did not load the prompt"; cat "$work/status.json"; cat "$work/worker.log"; exit 1; }
loaded=$(layer "$admin_worker" decode loaded_blocks)
[ "$loaded" = "$saved" ] || { echo "FAIL: the decode engine loaded $loaded blocks, the prefill engine saved $saved"; exit 1; }
echo "ok: a long prompt's $saved blocks went from the head's prefill engine to worker-1's decode engine, which answered as one engine"

short=$(complete_text "$gw_head" "hello there")
[ -n "$short" ] || { echo "FAIL: no answer to a short prompt"; exit 1; }
[ "$(layer "$admin_head" prefill saved_blocks)" = "$saved" ] || { echo "FAIL: a short prompt went through the prefill engine"; exit 1; }
echo "ok: a short prompt goes to the decode engine alone"
