#!/usr/bin/env bash
# `tokenhost admin` against a running server: status, plugins, the guards, a router and a scheduler swap, a kvcache
# swap (a new engine), engines added and removed, the running deployment exported; refusals exit 1 with the server's reason; no token
# and no server are said plainly.
set -euo pipefail
tokenhost=$1 here=$2 fixtures=$3
source "$here/lib.sh"
# The test registers fixtures from the build folder, outside the plugin folders.
sed '/^\[server\]/a plugins_from_anywhere = true' "$here/../../manifests/default.toml" > "$work/anywhere.toml"
start_server "$tokenhost" "$work/anywhere.toml"

refused() {  # refused PATTERN ARGS...: exits 1 and says PATTERN on stderr
  local pattern=$1; shift
  local rc=0
  "$tokenhost" admin --url "$admin" "$@" > "$work/out" 2> "$work/err" || rc=$?
  if [ "$rc" != 1 ] || ! grep -qE -- "$pattern" "$work/err"; then
    echo "FAIL: admin $* -> exit $rc (expected 1 and /$pattern/):"; cat "$work/out" "$work/err"; exit 1
  fi
  echo "ok: admin $* refused"
}

admin_ok 'engine main +model stories' status
admin_ok 'attention +attention.cpu_flash 1.0.0' status
admin_ok 'router router.round_robin' status
admin_ok 'model stories  f32  [0-9.]+ MiB \(\+0.0 MiB packed\)  /' status
admin_ok '"engines"' --json status
admin_ok '^scheduler.continuous  1.0.0  scheduler  ABI 1.11  /' plugins list
admin_ok '^[0-9]+ libraries open$' plugins list
admin_ok '"plugins"' --json plugins list
# The URL from $TOKENHOST_ADMIN_URL, or from the manifest the server runs (its admin_listen).
TOKENHOST_ADMIN_URL="$admin" "$tokenhost" admin status > "$work/out" 2>&1 && grep -q 'engine main' "$work/out" ||
  { cat "$work/out"; echo "FAIL: admin with TOKENHOST_ADMIN_URL"; exit 1; }
sed "s|^admin_listen = .*|admin_listen = \"${admin#http://}\"|" "$work/serve.toml" > "$work/running.toml"
"$tokenhost" admin --manifest "$work/running.toml" status > "$work/out" 2>&1 && grep -q 'engine main' "$work/out" ||
  { cat "$work/out"; echo "FAIL: admin --manifest"; exit 1; }
echo "ok: admin finds the server by TOKENHOST_ADMIN_URL and by --manifest"
admin_ok 'registered router.fixture from' plugins load "$fixtures/router_v2/plugin.toml"
admin_ok 'router.round_robin 1.0.0 -> router.fixture 2.0.0' router router.fixture
admin_ok 'scheduler.continuous 1.0.0 -> scheduler.fifo 1.0.0' swap main scheduler scheduler.fifo --set max_prefill_chunk=8
refused "did you mean 'max_prefill_chunk'" swap main scheduler scheduler.fifo --set max_prefil_chunk=8
refused "no engine 'mian'.*did you mean 'main'" swap mian scheduler scheduler.fifo
# A refused change leaves a line in the server's log, not only an answer to the caller.
grep -qE "admin POST /admin/engines/mian/slots/scheduler refused \(404\): no engine 'mian'" "$work/log" ||
  { echo "FAIL: the refused swap left no log line:"; cat "$work/log"; exit 1; }
echo "ok: the refused swap is in the server's log"
# The guards, off by default, changed live; a bad setting is refused by name and changes nothing.
admin_ok '^breakers  off' guards
admin_ok '^breakers  on  open after 3 consecutive failures' guards breakers --set enabled=true --set failures=3
admin_ok 'overload  on  action shed  classes batch@50% interactive  default batch' guards overload --set enabled=true --classes batch=0.5,interactive
refused 'overload.action must be "shed" or "cheaper", not "drop"' guards overload --set action=drop
admin_ok 'overload  on  action shed' guards
admin_ok '"state": "closed"' --json guards
admin_ok 'kvcache of main: kvcache.paged 1.0.0 -> kvcache.paged 1.0.0 \(a new engine' swap main kvcache kvcache.paged --set block_size=32 --set n_blocks=256
admin_ok 'kv blocks +256 free of 256 \(32 positions each, f16\)' status
# A stacking slot's layers (kv_connector): inserted, listed, refused out of range or as a whole-slot swap, removed.
admin_ok 'kv_connector layer 0 inserted: kv_connector.disk 1.0.0' layer insert main kv_connector kv_connector.disk --set "folder=$work/kv"
admin_ok 'kv_connector 0  kv_connector.disk 1.0.0  stored 0 blocks' status
admin_ok 'kv_connector idle: kvcache.paged has no prefix caching' status
refused 'position 4 is out of range \(0 to 0\)' layer remove main kv_connector --at 4
rc=0; "$tokenhost" admin --url "$admin" layer replace main kv_connector kv_connector.disk > /dev/null 2> "$work/err" || rc=$?
[ "$rc" = 2 ] && grep -q "replace needs the layer's position" "$work/err" ||
  { echo "FAIL: layer replace without --at -> exit $rc:"; cat "$work/err"; exit 1; }
echo "ok: admin layer replace without a position is a usage error"
refused 'the kv_connector slot stacks layers' swap main kv_connector kv_connector.disk
admin_ok 'kv_connector layer 0 removed: kv_connector.disk 1.0.0' layer remove main kv_connector --at 0

cat > "$work/second.toml" <<'TOML'
[engines.second]
model = "stories"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 16, n_blocks = 128 } }
scheduler = { plugin = "scheduler.static" }
TOML
admin_ok 'added engine second' engines add "$work/second.toml"
admin_ok 'engine second +model stories' status
# The deployment as it runs now, exported whole: `check` builds it as serve would (the router fixture's
# folder joins plugin_paths; the swapped scheduler keeps its setting; the added engine is there).
"$tokenhost" admin --url "$admin" export -o "$work/exported.toml" 2> "$work/err" ||
  { echo "FAIL: admin export:"; cat "$work/err"; exit 1; }
grep -q "restart with: tokenhost serve $work/exported.toml" "$work/err" || { echo "FAIL: admin export said:"; cat "$work/err"; exit 1; }
grep -q '^\[engines.second' "$work/exported.toml" && grep -qE '^ *max_prefill_chunk = 8$' "$work/exported.toml" &&
  grep -q "$fixtures/router_v2" "$work/exported.toml" || { echo "FAIL: the export:"; cat "$work/exported.toml"; exit 1; }
"$tokenhost" check "$work/exported.toml" > "$work/out" 2>&1 || { echo "FAIL: check of the export:"; cat "$work/out"; exit 1; }
echo "ok: admin export writes the running deployment, and check builds it as serve would"
refused "engine 'second' exists already" engines add "$work/second.toml"
# Both engines serve: round robin sends requests to each.
for _ in 1 2 3 4; do
  curl -sf "http://127.0.0.1:$gw/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 4}' | grep -q '"finish_reason"'
done
admin_ok 'removed engine second' engines remove second --grace 10
refused "last engine serving model 'stories'" engines remove main
refused "no engine 'second'" engines remove second

# No token anywhere: the client says where it looked.
(unset TOKENHOST_ADMIN_TOKEN; export TOKENHOST_CACHE="$work/empty"
 refused 'no token found: pass --token' status)
refused 'wrong admin token' --token wrong-token-0123456789 status
rc=0; "$tokenhost" admin --url http://127.0.0.1:1 status 2> "$work/err" || rc=$?
[ "$rc" = 1 ] && grep -q 'cannot reach the admin API at http://127.0.0.1:1' "$work/err" || { echo "FAIL: unreachable server -> $rc"; cat "$work/err"; exit 1; }
echo "ok: unreachable server said plainly"

# Greedy and past end-of-text: a sampled answer may end early at end-of-text.
curl -sf "http://127.0.0.1:$gw/v1/completions" -d '{"prompt": "still serving", "max_tokens": 3, "temperature": 0, "ignore_eos": true}' \
  | grep -q '"finish_reason":"length"'
kill -INT $pid
wait $pid
pid=""
echo "tokenhost admin behaves"
