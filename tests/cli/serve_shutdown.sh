#!/usr/bin/env bash
# `tokenhost serve` answers on its gateway and admin API, and on SIGTERM drains: requests in flight end
# with their tokens or a clear error, none hangs, and the process exits 0.
set -euo pipefail
tokenhost=$1 here=$2
source "$here/lib.sh"
start_server "$tokenhost" "$here/../../manifests/default.toml"

curl -sf "$admin/health" | grep -q '"ok"'
curl -sf "http://127.0.0.1:$gw/v1/generate" -d '{"prompt": "Hello", "max_tokens": 5}' > "$work/one.json"
grep -q '"finish_reason": "length"' "$work/one.json"
status=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$gw/v1/generate" -d '{"prompt": ')
[ "$status" = 400 ] || { echo "FAIL: malformed JSON got HTTP $status"; exit 1; }
status=$(curl -s -o "$work/bad.json" -w '%{http_code}' "${auth[@]}" "$admin/admin/engines/main/slots/scheduler" \
  -d '{"plugin": "scheduler.fifo", "config": {"max_prefill_chunk": "x"}}')
[ "$status" = 400 ] && grep -q "must be int" "$work/bad.json" || { echo "FAIL: bad admin change got $status"; cat "$work/bad.json"; exit 1; }

# Long requests in flight, then SIGTERM.
for i in $(seq 6); do
  curl -s "http://127.0.0.1:$gw/v1/generate" -d "{\"prompt\": \"request $i\", \"max_tokens\": 400}" > "$work/r$i.json" &
done
# Every one of them in flight first (a loaded machine starts curl late): the engine holds 6 sequences.
for _ in $(seq 100); do
  curl -s "${auth[@]}" "$admin/admin/engines" | grep -q '"sequences": *6\b' && break
  sleep 0.1
done
kill -TERM $pid
for _ in $(seq 200); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then echo "FAIL: still running 20 s after SIGTERM"; cat "$work/log"; exit 1; fi
wait $pid
rc=$?
pid=""
[ $rc -eq 0 ] || { echo "FAIL: exit code $rc"; cat "$work/log"; exit 1; }
wait  # the curls
for i in $(seq 6); do
  if ! grep -qE '"finish_reason": "(length|stop)"|shutting down' "$work/r$i.json"; then  # stop: the story ended
    echo "FAIL: request $i ended without tokens or an error:"; cat "$work/r$i.json"; cat "$work/log"; exit 1
  fi
done
grep -q "received signal 15: draining" "$work/log"
grep -q "shut down" "$work/log"
echo "serve drained and exited cleanly on SIGTERM"
