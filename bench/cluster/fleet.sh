#!/usr/bin/env bash
# The head's cost per worker with real processes on loopback (issue 31): WORKERS workers (one CPU engine
# of stories260K each), a head linked to all of them, and a head linked to one; after SETTLE seconds
# idle, each head's resident memory (VmRSS), and over WINDOW more seconds the heartbeat traffic per link
# (the links' own byte counters in `tokenhost admin status`: pings and their answers, which carry the
# worker's engine list). Heartbeat every heartbeat_ms (default 1000). Memory per worker is the
# difference between the head of all workers and a head of worker-1 alone, over WORKERS - 1.
# Usage: bench/cluster/fleet.sh [BUILD_DIR] [OUT_DIR]; environment (defaults): WORKERS=8 SETTLE=5 WINDOW=10
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
out=${2:-/tmp/tokenhost-cluster-fleet}
tokenhost=$build/bin/tokenhost
workers=${WORKERS:-8}
settle=${SETTLE:-5}
window=${WINDOW:-10}
models=$out
mkdir -p "$out"
source "$here/../lib.sh"
export TOKENHOST_ADMIN_TOKEN=cluster-fleet-token-0123456789abcdef TOKENHOST_THREADS=1
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

names=head,head-1
for i in $(seq "$workers"); do names+=",worker-$i"; done
rm -rf "$out/certs"
"$tokenhost" cluster init "$out/certs" --nodes "$names" > /dev/null
base=$((20000 + RANDOM % 20000))
list=""
for i in $(seq "$workers"); do
  cat > "$out/worker-$i.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
[cluster]
node = "worker-$i"
certs = "$out/certs"
listen = "127.0.0.1:$((base + i))"
[models.m]
source = "builtin"
name = "stories260K"
[engines.main]
model = "m"
device = "cpu"
[engines.main.attention]
plugin = "attention.cpu_flash"
[engines.main.kvcache]
plugin = "kvcache.paged"
config = { block_size = 16, n_blocks = 256 }
[engines.main.scheduler]
plugin = "scheduler.continuous"
TOML
  list+="${list:+, }{ name = \"worker-$i\", address = \"127.0.0.1:$((base + i))\" }"
done
head_toml() {  # head_toml NAME WORKERS_LIST
  cat <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
[cluster]
node = "$1"
certs = "$out/certs"
workers = [$2]
[models.m]
source = "builtin"
name = "stories260K"
TOML
}
head_toml head "$list" > "$out/head.toml"
head_toml head-1 "{ name = \"worker-1\", address = \"127.0.0.1:$((base + 1))\" }" > "$out/head-1.toml"

for i in $(seq "$workers"); do start_server "$out/worker-$i.toml" "$out/worker-$i.log"; pids+=("$pid"); done
start_server "$out/head-1.toml" "$out/head-1.log"
pids+=("$pid")
pid1=$pid
start_server "$out/head.toml" "$out/head.log"
pids+=("$pid")
for _ in $(seq 100); do [ "$(grep -c "joined from" "$out/head.log")" -ge "$workers" ] && break; sleep 0.1; done
[ "$(grep -c "joined from" "$out/head.log")" -ge "$workers" ] || { echo "not every worker joined:"; cat "$out/head.log"; exit 1; }
sleep "$settle"
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
bytes() {  # total bytes sent and received over all links of the head
  "$tokenhost" admin --url "$admin" --json status | node -e '
    let t = ""; process.stdin.on("data", (d) => (t += d)).on("end", () => {
      let s = 0, r = 0, m = 0;
      for (const w of JSON.parse(t).cluster.workers) { s += w.bytes_sent; r += w.bytes_received; m += w.messages_sent; }
      console.log(s, r, m);
    });'
}
read -r s0 r0 m0 < <(bytes)
sleep "$window"
read -r s1 r1 m1 < <(bytes)
machine_line
rss1=$(rss "$pid1") rssn=$(rss "$pid")
echo "| workers | head RSS MiB | head of 1 worker MiB | per worker KiB | heartbeat bytes/s per link, head to worker | worker to head | messages/s per link |"
echo "|---|---|---|---|---|---|---|"
awk -v n="$workers" -v a="$rssn" -v b="$rss1" -v s=$((s1 - s0)) -v r=$((r1 - r0)) -v m=$((m1 - m0)) -v w="$window" \
  'BEGIN { printf "| %d | %.1f | %.1f | %.0f | %.0f | %.0f | %.1f |\n", n, a / 1024, b / 1024, (a - b) / (n - 1), s / n / w, r / n / w, m / n / w }'
