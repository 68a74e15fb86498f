#!/usr/bin/env bash
# A head and two workers on loopback, as manifests/cluster/ ships them, with certificates from
# `tokenhost cluster init`: the workers' engines join the head and answer its requests with the same
# greedy text as a worker's own (local) engine; admin status shows each link's health; strangers (a
# certificate of another cluster's CA, a plain connection, garbage bytes on the cluster port, a silent
# connection) are refused and logged, and the worker keeps serving; a worker killed with -9 leaves the head's routing within the
# heartbeat timeout while the other serves, and joins again when it comes back.
set -euo pipefail
tokenhost=$1 here=$2
source "$here/lib.sh"
require_models "$here"
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

"$tokenhost" cluster init "$work/certs" --nodes head,worker-1,worker-2 > "$work/init.txt"
for f in ca.pem ca.key head.pem head.key worker-1.pem worker-1.key worker-2.pem worker-2.key; do
  grep -q "wrote $work/certs/$f" "$work/init.txt" || { echo "FAIL: init did not write $f"; cat "$work/init.txt"; exit 1; }
done
[ "$(stat -c %a "$work/certs/worker-1.key")" = 600 ] || { echo "FAIL: a key file is not mode 0600"; exit 1; }
"$tokenhost" cluster init "$work/stranger" --nodes head > /dev/null
echo "ok: cluster init writes a CA and a certificate per node"

# Cluster ports: fixed in a manifest (peers must know them); drawn high to keep parallel runs apart.
base=$((20000 + RANDOM % 20000))
p1=$base p2=$((base + 1))
manifest() {  # manifest NAME CERTS > FILE: manifests/cluster/NAME.toml with system-chosen HTTP ports and these cluster ports
  sed -e 's/^listen = "127.0.0.1:80.*"/listen = "127.0.0.1:0"/' -e 's/^admin_listen = .*/admin_listen = "127.0.0.1:0"/' \
      -e "s/127.0.0.1:9101/127.0.0.1:$p1/" -e "s/127.0.0.1:9102/127.0.0.1:$p2/" -e "s|^certs = .*|certs = \"$2\"|" \
      "$here/../../manifests/cluster/$1.toml"
}
start() {  # start NAME MANIFEST READY: serve MANIFEST, log to $work/NAME.log, wait for READY in it
  "$tokenhost" serve "$2" > "$work/$1.log" 2>&1 &
  pids+=($!)
  eval "pid_${1//-/_}=$!"
  for _ in $(seq 150); do grep -q "$3" "$work/$1.log" && return 0; sleep 0.1; done
  echo "FAIL: $1 did not say '$3':"; cat "$work/$1.log"; exit 1
}
ports() {  # ports NAME: sets gw and admin from NAME's log
  local line
  line=$(grep "gateway listening" "$work/$1.log")
  gw=$(sed -E 's/.*listening on [0-9.]+:([0-9]+),.*/\1/' <<<"$line")
  admin="http://127.0.0.1:$(sed -E 's/.*admin API on [0-9.]+:([0-9]+).*/\1/' <<<"$line")"
}
complete() {  # complete PORT PROMPT: the completion's text, greedy
  curl -s "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$2\", \"max_tokens\": 24, \"temperature\": 0}" > "$work/answer.json"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$work/answer.json" 2>/dev/null ||
    { echo "FAIL: no completion from port $1: $(cat "$work/answer.json")" >&2; return 1; }
}
wait_log() {  # wait_log NAME PATTERN SECONDS
  for _ in $(seq $((${3} * 10))); do grep -q "$2" "$work/$1.log" && return 0; sleep 0.1; done
  echo "FAIL: $1 did not say '$2' within $3 s:"; cat "$work/$1.log"; exit 1
}

for n in worker-1 worker-2 head; do manifest $n "$work/certs" > "$work/$n.toml"; done
start worker-1 "$work/worker-1.toml" "gateway listening"
start worker-2 "$work/worker-2.toml" "gateway listening"
start head "$work/head.toml" "gateway listening"
wait_log head "worker worker-1 joined" 10
wait_log head "worker worker-2 joined" 10
echo "ok: both workers joined the head over mutual TLS"

ports worker-1
w1gw=$gw w1admin=$admin
ports head
for prompt in "Once upon a time" "The little dog" "Lily and Tom went to the park"; do
  local_text=$(complete "$w1gw" "$prompt")
  remote_text=$(complete "$gw" "$prompt")
  [ -n "$local_text" ] && [ "$local_text" = "$remote_text" ] ||
    { echo "FAIL: '$prompt': the head (remote engines) answered '$remote_text', a worker's own engine '$local_text'"; exit 1; }
done
echo "ok: remote engines give the same greedy text as a local one"

"$tokenhost" admin --url "$admin" --json status > "$work/status.json"
python3 - "$work/status.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
c = s["cluster"]
assert c["node"] == "head" and c["tls"] is True, c
ws = {w["name"]: w for w in c["workers"]}
for n in ("worker-1", "worker-2"):
    w = ws[n]
    assert w["state"] == "up", w
    assert w["engines"] and w["engines"][0]["name"] == "main", w
    assert w["messages_sent"] > 0 and w["bytes_received"] > 0, w
names = sorted(e["name"] for e in s["engines"])
assert names == ["main@worker-1", "main@worker-2"], names
PY
echo "ok: admin status shows the nodes, their engines and each link's health"

# Strangers: a head with another cluster's certificate, a plain (TLS-less) head, garbage bytes.
mkdir -p "$work/s"
cp "$work/stranger/head.pem" "$work/stranger/head.key" "$work/stranger/ca.pem" "$work/s/"
manifest head "$work/s" > "$work/stranger.toml"
sed -i -e '/^workers = /,/}]$/c workers = [{ name = "worker-1", address = "127.0.0.1:'"$p1"'" }]' "$work/stranger.toml"
start stranger "$work/stranger.toml" "gateway listening"
wait_log stranger "worker-1 at 127.0.0.1:$p1 not joined" 15
manifest head "$work/s" | sed -e "s|^certs = .*|tls = \"off: any peer that reaches the cluster port joins without a certificate\"|" \
  -e '/^workers = /,/}]$/c workers = [{ name = "worker-1", address = "127.0.0.1:'"$p1"'" }]' > "$work/plain.toml"
start plain "$work/plain.toml" "gateway listening"
wait_log plain "worker-1 at 127.0.0.1:$p1 not joined" 15
head -c 4096 /dev/urandom > "/dev/tcp/127.0.0.1/$p1" || true
if grep -q "head .* joined" <(grep -v "head head joined" "$work/worker-1.log"); then echo "FAIL: worker-1 admitted a stranger"; grep joined "$work/worker-1.log"; exit 1; fi
grep -q "refused a TLS handshake with 127.0.0.1:[0-9]* (incoming): .*unknown ca" "$work/worker-1.log" ||
  { echo "FAIL: worker-1 did not log the stranger's refused handshake"; cat "$work/worker-1.log"; exit 1; }
grep -q "refused a TLS handshake with 127.0.0.1:$p1 (outgoing): its certificate" "$work/stranger.log" ||
  { echo "FAIL: the stranger did not log why worker-1 refused it"; cat "$work/stranger.log"; exit 1; }
# A silent connection (it would keep the worker's network thread spinning) is closed by the worker
# after its handshake deadline (2 s).
exec 3<>"/dev/tcp/127.0.0.1/$p1"
SECONDS=0
timeout 10 cat <&3 > /dev/null || true
exec 3>&-
[ "$SECONDS" -le 5 ] || { echo "FAIL: worker-1 kept a silent connection open ${SECONDS} s"; exit 1; }
wait_log worker-1 "closed the incoming TLS connection with 127.0.0.1:[0-9]*: no handshake within 2000 ms" 2
[ "$(complete "$gw" "Once upon a time")" = "$(complete "$w1gw" "Once upon a time")" ] || { echo "FAIL: serving changed after the strangers"; exit 1; }
echo "ok: a stranger's certificate, a plain connection, garbage bytes and a silent connection are refused and logged; the cluster keeps serving"

# kill -9 of worker-1: the head stops routing to it within the heartbeat timeout; worker-2 serves.
kill -9 "$pid_worker_1"
wait_log head "worker worker-1 lost" 6
for i in 1 2 3 4; do [ -n "$(complete "$gw" "Once upon a time")" ] || { echo "FAIL: request $i after the kill"; exit 1; }; done
"$tokenhost" admin --url "$admin" --json status | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert [e["name"] for e in s["engines"]] == ["main@worker-2"], s["engines"]
assert {w["name"]: w["state"] for w in s["cluster"]["workers"]}["worker-1"] in ("down", "connecting"), s["cluster"]'
echo "ok: a killed worker leaves the head's routing; the other serves"
grep -c "joined from" "$work/head.log" > "$work/joins_before"
start worker-1 "$work/worker-1.toml" "gateway listening"
for _ in $(seq 100); do [ "$(grep -c "worker worker-1 joined" "$work/head.log")" -ge 2 ] && break; sleep 0.1; done
[ "$(grep -c "worker worker-1 joined" "$work/head.log")" -ge 2 ] || { echo "FAIL: worker-1 did not join again"; cat "$work/head.log"; exit 1; }
"$tokenhost" admin --url "$admin" --json status | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert sorted(e["name"] for e in s["engines"]) == ["main@worker-1", "main@worker-2"], s["engines"]'
echo "ok: the restarted worker joins again and serves"
