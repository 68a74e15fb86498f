#!/usr/bin/env bash
# The admin API over HTTP: list engines and plugins, register a plugin manifest, swap a slot, load and
# unload an optional slot; refused changes answer a 4xx JSON error and change nothing.
set -euo pipefail
tokenhost=$1 here=$2 fixtures=$3
source "$here/lib.sh"
start_server "$tokenhost" "$here/../../manifests/default.toml"

expect() {  # expect METHOD PATH BODY STATUS PATTERN
  local status
  status=$(curl -s -o "$work/out" -w '%{http_code}' -X "$1" "$admin$2" ${3:+-d "$3"})
  if [ "$status" != "$4" ] || ! grep -qE -- "$5" "$work/out"; then
    echo "FAIL: $1 $2 $3 -> $status (expected $4 and /$5/):"; cat "$work/out"; echo; exit 1
  fi
  echo "ok: $1 $2 -> $status"
}

expect GET /admin/engines "" 200 '"id": "scheduler.continuous"'
expect GET /admin/plugins "" 200 '"id": "spec_decode.ngram"'
expect POST /admin/plugins "{\"manifest\": \"$fixtures/router_v2/plugin.toml\"}" 200 '"id": "router.fixture"'
expect POST /admin/plugins '{"manifest": "/nonexistent/plugin.toml"}' 404 'cannot open the file'
expect POST /admin/router '{"plugin": "router.fixture"}' 200 'router.round_robin 1.0.0 -> router.fixture 2.0.0'
expect POST /admin/engines/main/slots/scheduler '{"plugin": "scheduler.fifo", "config": {"max_prefill_chunk": 8}}' 200 '"ok": true'
expect POST /admin/engines/main/slots/spec_decode '{"plugin": "spec_decode.ngram"}' 200 '\(none\) -> spec_decode.ngram'
expect DELETE /admin/engines/main/slots/spec_decode "" 200 'spec_decode.ngram 1.0.0 -> \(none\)'
expect DELETE /admin/engines/main/slots/attention "" 400 'is required'
expect POST /admin/engines/main/slots/attention '{"plugin": "attention.refernce"}' 400 "did you mean 'attention.reference'"
expect POST /admin/engines/nope/slots/attention '{"plugin": "attention.reference"}' 404 "no engine 'nope'"
expect POST /admin/engines/main/slots/attention '{"plugin": "attention.reference", "extra": 1}' 400 "unknown field 'extra'"
expect POST /admin/engines/main/slots/attention 'not json' 400 'malformed JSON'
expect GET /admin/nothing "" 404 'no route GET /admin/nothing'
expect GET /metrics "" 200 'tokenhost_sequences_running\{engine="main"\} 0'

# Still serving, with the swapped plugins.
curl -sf "http://127.0.0.1:$gw/v1/generate" -d '{"prompt": "still here", "max_tokens": 3}' | grep -q '"finish_reason": "length"'
expect GET /admin/engines "" 200 '"version": "2.0.0"'
kill -INT $pid
wait $pid
pid=""
echo "admin API behaves"
