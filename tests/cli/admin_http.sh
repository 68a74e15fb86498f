#!/usr/bin/env bash
# The admin API over HTTP: list engines and plugins, register a plugin manifest, swap a slot, load and
# unload an optional slot; refused changes answer a 4xx JSON error and change nothing.
set -euo pipefail
tokenhost=$1 here=$2 fixtures=$3
source "$here/lib.sh"
export TOKENHOST_FIXTURE_MARK="$work/mark"  # the marked fixtures' constructors write their process's pid there
# The test registers fixtures from the build folder, outside the plugin folders.
sed '/^\[server\]/a plugins_from_anywhere = true' "$here/../../manifests/default.toml" > "$work/anywhere.toml"
start_server "$tokenhost" "$work/anywhere.toml"

expect() {  # expect METHOD PATH BODY STATUS PATTERN
  local status
  status=$(curl -s -o "$work/out" -w '%{http_code}' "${auth[@]}" -X "$1" "$admin$2" ${3:+-d "$3"})
  if [ "$status" != "$4" ] || ! grep -qE -- "$5" "$work/out"; then
    echo "FAIL: $1 $2 $3 -> $status (expected $4 and /$5/):"; cat "$work/out"; echo; exit 1
  fi
  echo "ok: $1 $2 -> $status"
}

# Without the token, or with a wrong one, every /admin/ route is refused and nothing changes.
for route in "GET /admin/engines" "POST /admin/router" "DELETE /admin/engines/main/slots/spec_decode"; do
  set -- $route
  status=$(curl -s -o "$work/out" -w '%{http_code}' -X "$1" "$admin$2" -d '{"plugin": "router.round_robin"}')
  [ "$status" = 401 ] && grep -q "Authorization: Bearer" "$work/out" || { echo "FAIL: $route without a token -> $status"; cat "$work/out"; exit 1; }
  status=$(curl -s -o "$work/out" -w '%{http_code}' -H "Authorization: Bearer wrong" -X "$1" "$admin$2")
  [ "$status" = 401 ] && grep -q "wrong admin token" "$work/out" || { echo "FAIL: $route with a wrong token -> $status"; exit 1; }
done
echo "ok: /admin/ refused without the token"
expect GET /admin/engines "" 200 '"id": "scheduler.continuous"'
expect GET /admin/engines "" 200 '"id": "router.round_robin"'
expect GET /admin/plugins "" 200 '"id": "spec_decode.ngram"'
expect POST /admin/plugins "{\"manifest\": \"$fixtures/router_v2/plugin.toml\"}" 200 '"id": "router.fixture"'
expect POST /admin/plugins '{"manifest": "/nonexistent/plugin.toml"}' 404 'cannot open the file'
# A device or an oversized file is refused before it is read (/dev/zero once grew the server to GBs).
expect POST /admin/plugins '{"manifest": "/dev/zero"}' 400 '/dev/zero:1:1: is not a regular file'
head -c 2000000 /dev/zero | tr '\0' '#' > "$work/huge.toml"
expect POST /admin/plugins "{\"manifest\": \"$work/huge.toml\"}" 400 'is 2000000 bytes, more than a manifest may be \(1048576\)'
# A library is opened first in a separate process: one the host refuses runs none of its code in the
# server (its constructor ran only there); one it accepts is then opened in the server too.
expect POST /admin/plugins "{\"manifest\": \"$fixtures/marked_refused/plugin.toml\"}" 400 "declares kind 'router' but plugin.toml says 'scheduler'"
{ [ -s "$work/mark" ] && ! grep -qx "$pid" "$work/mark"; } ||
  { echo "FAIL: the refused library's constructor ran in the server ($pid), or nowhere:"; cat "$work/mark" 2>/dev/null; exit 1; }
echo "ok: the refused library ran only in the checking process ($(tr '\n' ' ' < "$work/mark"))"
expect POST /admin/plugins "{\"manifest\": \"$fixtures/marked_router/plugin.toml\"}" 200 '"id": "router.marked"'
grep -qx "$pid" "$work/mark" || { echo "FAIL: the accepted library was not opened in the server ($pid):"; cat "$work/mark"; exit 1; }
echo "ok: the accepted library was opened in the server after its check"
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
# A config nested 50,000 deep is refused while it is parsed (it once overflowed the server's stack).
deep=$(head -c 50000 /dev/zero | tr '\0' '[')
expect POST /admin/router "{\"plugin\": \"router.round_robin\", \"config\": {\"x\": $deep}}" 400 'deeper than 64 levels'
expect GET /metrics "" 200 'tokenhost_sequences_running\{engine="main",experiment="",arm=""\} 0'

# Still serving, with the swapped plugins.
curl -sf "http://127.0.0.1:$gw/v1/generate" -d '{"prompt": "still here", "max_tokens": 3}' | grep -q '"finish_reason": "length"'
expect GET /admin/engines "" 200 '"version": "2.0.0"'
kill -INT $pid
wait $pid
pid=""

# Without a configured token the server makes one, readable by its user only, and logs where it is:
# one file per admin port, so a second server does not lock `tokenhost admin` out of the first.
unset TOKENHOST_ADMIN_TOKEN
export TOKENHOST_CACHE="$work/cache"
start_server "$tokenhost" "$here/../../manifests/default.toml"
first_pid=$pid first_admin=$admin
mv "$work/log" "$work/first.log"
start_server "$tokenhost" "$here/../../manifests/default.toml"
for a in "$first_admin" "$admin"; do
  file="$TOKENHOST_CACHE/admin-token-${a##*:}"
  grep -q "admin API token generated and written to $file" "$work/first.log" "$work/log" || { cat "$work/first.log" "$work/log"; exit 1; }
  [ "$(stat -c %a "$file")" = 600 ] || { echo "FAIL: $file is not mode 600"; exit 1; }
  token=$(cat "$file")
  [ ${#token} -ge 32 ] || { echo "FAIL: short generated token"; exit 1; }
  curl -sf -H "Authorization: Bearer $token" "$a/admin/engines" | grep -q '"name": "main"'
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$a/admin/engines")" = 401 ]
  "$tokenhost" admin --url "$a" status | grep -q "main" || { echo "FAIL: tokenhost admin did not find the token of $a"; exit 1; }
done
[ "$(cat "$TOKENHOST_CACHE/admin-token-${first_admin##*:}")" != "$(cat "$TOKENHOST_CACHE/admin-token-${admin##*:}")" ]
kill -INT $first_pid $pid
wait $first_pid
wait $pid
pid=""
echo "admin API behaves"
