#!/usr/bin/env bash
# A head and two workers on loopback, as manifests/cluster/ ships them, with certificates from
# `tokenhost cluster init`: the workers' engines join the head and answer its requests with the same
# greedy text as a worker's own (local) engine; admin status shows each link's health; strangers (a
# certificate of another cluster's CA, a plain connection, garbage bytes on the cluster port, a silent
# connection) are refused and logged, and the worker keeps serving; a worker killed with -9 leaves the head's routing within the
# heartbeat timeout while the other serves, and joins again when it comes back; the head's admin API
# swaps a remote engine's plugin and splits an A/B experiment across workers, and follows engines added
# and removed on a worker; a second head serves
# the same workers, and when it is killed the workers free its sequences while the first head serves;
# a worker's own client limit holds across two heads.
set -euo pipefail
tokenhost=$1 here=$2
source "$here/lib.sh"
require_models "$here"
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

"$tokenhost" cluster init "$work/certs" --nodes head,head-2,worker-1,worker-2 > "$work/init.txt"
for f in ca.pem ca.key head.pem head.key head-2.pem head-2.key worker-1.pem worker-1.key worker-2.pem worker-2.key; do
  grep -q "wrote $work/certs/$f" "$work/init.txt" || { echo "FAIL: init did not write $f"; cat "$work/init.txt"; exit 1; }
done
[ "$(stat -c %a "$work/certs/worker-1.key")" = 600 ] || { echo "FAIL: a key file is not mode 0600"; exit 1; }
"$tokenhost" cluster init "$work/stranger" --nodes head > /dev/null
echo "ok: cluster init writes a CA and a certificate per node"

# Cluster ports: fixed in a manifest (peers must know them); drawn high to keep parallel runs apart.
base=$((20000 + RANDOM % 20000))
p1=$base p2=$((base + 1))
manifest() {  # manifest NAME CERTS > FILE: manifests/cluster/NAME.toml with system-chosen HTTP ports and these cluster ports
  # 4 sequences per step on a worker: under the failover load most requests wait, and the kill finds
  # both running and waiting ones.
  sed -e 's/^listen = "127.0.0.1:80.*"/listen = "127.0.0.1:0"/' -e 's/^admin_listen = .*/admin_listen = "127.0.0.1:0"/' \
      -e "s/127.0.0.1:9101/127.0.0.1:$p1/" -e "s/127.0.0.1:9102/127.0.0.1:$p2/" -e "s|^certs = .*|certs = \"$2\"|" \
      -e 's/^max_step_seqs = .*/max_step_seqs = 4/' "$here/../../manifests/cluster/$1.toml"
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

# kill -9 of worker-1 under 32 requests (16 streamed, 16 answered whole, 480 tokens each), once the
# first streams are under way: none hangs; a stream whose tokens had gone out ends with an error event,
# the others (waiting, or on worker-2) complete; every request answered whole completes, those that
# were running on worker-1 run again on worker-2. The head drops worker-1 when CAF reports the
# connection down (within the heartbeat timeout, 3 s, had it hung instead).
python3 "$here/cluster_load.py" "$gw" 16 16 480 "$work/ready" 4 10 60 > "$work/load.json" 2> "$work/load.err" &
load=$!
for _ in $(seq 1000); do [ -f "$work/ready" ] && break; sleep 0.01; done
[ -f "$work/ready" ] || { echo "FAIL: the load's streams did not start"; cat "$work/load.err"; exit 1; }
killed_at=$(date +%s.%N)
kill -9 "$pid_worker_1"
wait "$load" || { echo "FAIL: the load under the kill:"; cat "$work/load.json" "$work/load.err"; tail -20 "$work/head.log"; exit 1; }
python3 - "$work/load.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["whole_completed"] == 16, s
assert s["streams_errored"] >= 1 and s["streams_completed"] >= 1, ("the kill found no stream both ways", s)
assert "lost after" in s["stream_error"], s
PY
grep -q "nobody had seen: run again" "$work/head.log" || { echo "FAIL: no request answered whole was running on worker-1"; cat "$work/head.log"; exit 1; }
python3 - "$work/head.log" "$killed_at" <<'PY'
import re, sys, datetime
line = next(l for l in open(sys.argv[1]) if "worker worker-1 lost" in l)
at = datetime.datetime.strptime(re.match(r"\[([^\]]+)\]", line).group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
assert at - float(sys.argv[2]) <= 3.0, f"worker-1 left the routing {at - float(sys.argv[2]):.2f} s after the kill"
PY
echo "ok: kill -9 of a worker under 32 requests: $(cat "$work/load.json"); none hangs; whole answers complete"
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

# Remote engines through the head's admin API: a live swap runs on the worker (its own status shows
# it, the answers stay the same); a refused one names the node and changes nothing; an A/B experiment
# splits traffic between engines of the two workers.
ports worker-1
w1admin=$admin
ports head
before=$(complete "$gw" "Once upon a time")
"$tokenhost" admin --url "$admin" swap main@worker-1 scheduler scheduler.fifo > "$work/swap.txt" ||
  { echo "FAIL: the swap of a remote engine's scheduler"; cat "$work/swap.txt"; exit 1; }
"$tokenhost" admin --url "$w1admin" --json status | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["engines"][0]["scheduler"]["id"] == "scheduler.fifo", s["engines"][0]["scheduler"]'
"$tokenhost" admin --url "$admin" --json status | python3 -c '
import json, sys
s = json.load(sys.stdin)
e = next(e for e in s["engines"] if e["name"] == "main@worker-1")
assert e["node"] == "worker-1" and e["scheduler"]["id"] == "scheduler.fifo", e'
if "$tokenhost" admin --url "$admin" swap main@worker-1 scheduler scheduler.nonexistent > /dev/null 2> "$work/err"; then
  echo "FAIL: a swap to an unknown plugin was accepted"; exit 1
fi
grep -q "node worker-1: " "$work/err" || { echo "FAIL: the refusal does not name the node"; cat "$work/err"; exit 1; }
for _ in 1 2 3 4; do [ "$(complete "$gw" "Once upon a time")" = "$before" ] || { echo "FAIL: answers changed after the swap"; exit 1; }; done
"$tokenhost" admin --url "$admin" ab start split --arm a=main@worker-1:50 --arm b=main@worker-2:50 --sticky none > /dev/null
for i in $(seq 20); do complete "$gw" "Once upon a time $i" > /dev/null; done
"$tokenhost" admin --url "$admin" --json ab report split | python3 -c '
import json, sys
r = json.load(sys.stdin)
n = {a["name"]: a["requests"] for a in r["arms"]}
assert sum(n.values()) == 20 and min(n.values()) > 0, n'
"$tokenhost" admin --url "$admin" ab stop split > /dev/null
echo "ok: a live swap and an A/B experiment on remote engines through the head's admin API"

# Engines added and removed on a worker (its own admin API) join and leave the head's routing with
# the next heartbeats.
cat > "$work/extra.toml" <<'TOML'
[engines.extra]
model = "stories"
device = "cpu"
[engines.extra.attention]
plugin = "attention.reference"
[engines.extra.kvcache]
plugin = "kvcache.paged"
config = { block_size = 16, n_blocks = 256 }
[engines.extra.scheduler]
plugin = "scheduler.continuous"
TOML
routed() {  # routed: the head's engine names, sorted, one line
  "$tokenhost" admin --url "$admin" --json status | python3 -c 'import json, sys; print(" ".join(sorted(e["name"] for e in json.load(sys.stdin)["engines"])))'
}
"$tokenhost" admin --url "$w1admin" engines add "$work/extra.toml" > /dev/null
for _ in $(seq 50); do [ "$(routed)" = "extra@worker-1 main@worker-1 main@worker-2" ] && break; sleep 0.1; done
[ "$(routed)" = "extra@worker-1 main@worker-1 main@worker-2" ] || { echo "FAIL: the worker's new engine is not routed: $(routed)"; exit 1; }
"$tokenhost" admin --url "$w1admin" engines remove extra > /dev/null
for _ in $(seq 50); do [ "$(routed)" = "main@worker-1 main@worker-2" ] && break; sleep 0.1; done
[ "$(routed)" = "main@worker-1 main@worker-2" ] || { echo "FAIL: the worker's removed engine is still routed: $(routed)"; exit 1; }
echo "ok: an engine added on a worker is routed by the head, and one removed there leaves"

# The cache-aware router across nodes: each heartbeat brings a worker's prefix summaries (the block keys
# its prefix caches hold, when they changed), so the head's router.prefix_affinity sends a prompt to the
# remote engine that holds it. worker-2's "cached" engine is warmed through worker-2's own gateway; the
# head, given no summaries, would send the prompt to the first of the idle engines (cached@worker-1).
sed -e 's/engines.extra/engines.cached/g' -e 's/kvcache.paged/kvcache.prefix/' "$work/extra.toml" > "$work/cached.toml"
ports worker-2
w2gw=$gw w2admin=$admin
ports head
"$tokenhost" admin --url "$w1admin" engines add "$work/cached.toml" > /dev/null
"$tokenhost" admin --url "$w2admin" engines add "$work/cached.toml" > /dev/null
long="Once upon a time there was a little girl named Lily who loved to play in the garden with her dog and her cat every day"
for _ in 1 2 3; do complete "$w2gw" "$long" > /dev/null; done  # worker-2's round robin: cached gets one or two
"$tokenhost" admin --url "$admin" router router.prefix_affinity > /dev/null
held() {  # held: cached@worker-2's summary on the head, in blocks
  "$tokenhost" admin --url "$admin" --json status | python3 -c '
import json, sys
print(next((e.get("prefix_summary_blocks", 0) for e in json.load(sys.stdin)["engines"] if e["name"] == "cached@worker-2"), 0))'
}
for _ in $(seq 50); do [ "$(held)" -gt 0 ] && break; sleep 0.1; done
[ "$(held)" -gt 0 ] || { echo "FAIL: the head holds no prefix summary of cached@worker-2"; exit 1; }
for i in 1 2 3 4; do
  engine=$(curl -s "http://127.0.0.1:$gw/v1/generate" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$long\", \"max_tokens\": 4}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["engine"])')
  [ "$engine" = "cached@worker-2" ] || { echo "FAIL: request $i with worker-2's cached prompt went to $engine"; exit 1; }
done
blocks=$(held)
"$tokenhost" admin --url "$admin" router router.round_robin > /dev/null
"$tokenhost" admin --url "$w1admin" engines remove cached > /dev/null
"$tokenhost" admin --url "$w2admin" engines remove cached > /dev/null
for _ in $(seq 50); do [ "$(routed)" = "main@worker-1 main@worker-2" ] && break; sleep 0.1; done
echo "ok: a worker's prefix summary reaches the head ($blocks blocks), and router.prefix_affinity sends its prompt there"

# A second head on the same workers: both serve. kill -9 of it under 8 streams: the first head keeps
# serving, and the workers cancel the dead head's sequences, their KV pools back to empty.
manifest head "$work/certs" | sed -e 's/^node = "head"/node = "head-2"/' > "$work/head-2.toml"
start head-2 "$work/head-2.toml" "gateway listening"
wait_log head-2 "worker worker-1 joined" 10
wait_log head-2 "worker worker-2 joined" 10
ports head-2
gw2=$gw
ports head
[ "$(complete "$gw2" "Once upon a time")" = "$(complete "$gw" "Once upon a time")" ] || { echo "FAIL: the two heads answer differently"; exit 1; }
kv_used() {  # kv_used NAME: the KV blocks NAME's engine holds (from its /metrics; 0 before its first step)
  local line
  line=$(grep "gateway listening" "$work/$1.log")
  curl -sf "http://127.0.0.1:$(sed -E 's/.*admin API on [0-9.]+:([0-9]+).*/\1/' <<<"$line")/metrics" |
    awk '/^tokenhost_kv_blocks_used\{engine="main",/ {v = $2} END {print v + 0}'
}
for i in $(seq 8); do
  curl -sN "http://127.0.0.1:$gw2/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Once upon a time", "max_tokens": 480, "temperature": 0, "ignore_eos": true, "stream": true}' > /dev/null 2>&1 &
done
for _ in $(seq 200); do [ "$(kv_used worker-1)" != 0 ] && [ "$(kv_used worker-2)" != 0 ] && break; sleep 0.01; done
[ "$(kv_used worker-1)" != 0 ] && [ "$(kv_used worker-2)" != 0 ] || { echo "FAIL: head-2's streams did not reach both workers"; exit 1; }
kill -9 "$pid_head_2"
wait_log worker-1 "head head-2 left .*: [1-9][0-9]* of its sequence(s) cancelled" 5
wait_log worker-2 "head head-2 left .*: [1-9][0-9]* of its sequence(s) cancelled" 5
for _ in $(seq 100); do [ "$(kv_used worker-1)" = 0 ] && [ "$(kv_used worker-2)" = 0 ] && break; sleep 0.05; done
[ "$(kv_used worker-1)" = 0 ] && [ "$(kv_used worker-2)" = 0 ] ||
  { echo "FAIL: the workers still hold KV blocks of the dead head: $(kv_used worker-1), $(kv_used worker-2)"; exit 1; }
[ -n "$(complete "$gw" "The little dog")" ] || { echo "FAIL: the first head stopped serving"; exit 1; }
echo "ok: two heads serve the same workers; a head killed under 8 streams leaves the workers' KV pools empty, the other head serves"

# A worker's own limits hold across heads: worker-2 again with [limits] client_max_sequences = 2 and
# worker-1 gone, two heads; a client running two long streams through one head is refused a third
# sequence through the other (429 with Retry-After, naming the worker's limit), by the worker.
kill -9 "$pid_worker_1" "$pid_worker_2"
manifest worker-2 "$work/certs" > "$work/worker-2-limits.toml"
printf '\n[limits]\nclient_max_sequences = 2\n' >> "$work/worker-2-limits.toml"
start worker-2 "$work/worker-2-limits.toml" "gateway listening"
for _ in $(seq 100); do [ "$(grep -c "worker worker-2 joined" "$work/head.log")" -ge 2 ] && break; sleep 0.1; done
[ "$(grep -c "worker worker-2 joined" "$work/head.log")" -ge 2 ] || { echo "FAIL: worker-2 did not join head again"; cat "$work/head.log"; exit 1; }
start head-2 "$work/head-2.toml" "gateway listening"
wait_log head-2 "worker worker-2 joined" 10
ports head-2
gw2=$gw
ports head
for i in 1 2; do
  curl -sN "http://127.0.0.1:$gw/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Once upon a time", "max_tokens": 480, "temperature": 0, "ignore_eos": true, "stream": true}' > /dev/null 2>&1 &
done
for _ in $(seq 200); do [ "$(kv_used worker-2)" != 0 ] && break; sleep 0.01; done
status=$(curl -s -D "$work/headers" -o "$work/refused.json" -w '%{http_code}' "http://127.0.0.1:$gw2/v1/completions" \
  -H 'Content-Type: application/json' -d '{"prompt": "The little dog", "max_tokens": 8}')
[ "$status" = 429 ] || { echo "FAIL: a third sequence through the other head got $status"; cat "$work/refused.json"; exit 1; }
grep -qi "^retry-after: [0-9]" "$work/headers" || { echo "FAIL: no Retry-After"; cat "$work/headers"; exit 1; }
grep -q "node worker-2 refused it" "$work/refused.json" || { echo "FAIL: the refusal does not name the worker"; cat "$work/refused.json"; exit 1; }
wait_log worker-2 "refused a sequence of head head-2" 2
echo "ok: a worker's client limit holds across two heads (429 from the worker, Retry-After)"
