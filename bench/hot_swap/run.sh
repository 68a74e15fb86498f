#!/usr/bin/env bash
# Hot swap under load: 64 concurrent streams (`tokenhost bench`) on the 110M Q8_0 shape, in rounds that
# alternate a steady run (no change) with a run during which `tokenhost admin` swaps a plugin every
# SWAP_EVERY seconds, cycling attention (cpu_flash, a new instance), scheduler (continuous with another
# prefill chunk, and back), router (round robin, a new instance) and kvcache (paged with another block
# count: a new engine beside the old, which drains). Reports per run: output tokens/s, ITL p50/p99,
# failed requests; and per slot the swap latency the server measured (admin call -> first step on the
# new plugin, also exported as tokenhost_swap_latency_seconds). A kvcache swap asked for while the
# previous one still drains is refused by the server (counted, not a failure).
# Usage: bench/hot_swap/run.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]
set -euo pipefail
build=${1:-build}
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-hot-swap-bench}
rounds=${ROUNDS:-3}
swap_every=${SWAP_EVERY:-2}
here=$(cd "$(dirname "$0")" && pwd)
tokenhost="$build/bin/tokenhost"
source "$here/../lib.sh"
mkdir -p "$models" "$out"
model=$(bench_model 110M q8_0)
machine_line
export TOKENHOST_ADMIN_TOKEN=hot-swap-bench-token-0123456789

pid="" swapper=""
trap '[ -n "$swapper" ] && kill $swapper 2>/dev/null; [ -n "$pid" ] && kill $pid 2>/dev/null; true' EXIT
sed -e "s|@MODEL@|$model|" "$here/manifest.toml.in" > "$out/serve.toml"
start_server "$out/serve.toml" "$out/serve.log"

# One swap after another until killed; each `admin` call must succeed.
swap_loop() {
  local i=0 blocks
  while true; do
    sleep "$swap_every"
    case $((i % 4)) in
      0) "$tokenhost" admin --url "$admin" swap main attention attention.cpu_flash ;;
      1) "$tokenhost" admin --url "$admin" swap main scheduler scheduler.continuous --set max_prefill_chunk=$(( i % 8 == 1 ? 256 : 512 )) --set max_prefill_tokens_with_decodes=64 ;;
      2) "$tokenhost" admin --url "$admin" router router.round_robin ;;
      3) blocks=$(( i % 8 == 3 ? 1700 : 1600 ))
         "$tokenhost" admin --url "$admin" swap main kvcache kvcache.paged --set block_size=16 --set n_blocks=$blocks ;;
    esac >> "$out/swaps.log" 2>&1 || grep -q "still draining" <(tail -1 "$out/swaps.log") ||
      echo "swap $i FAILED: $(tail -1 "$out/swaps.log")"
    i=$((i + 1))
  done
}

load() {  # load NAME
  "$tokenhost" bench --url "http://127.0.0.1:$gw" -c 64 -n 128 --prompt-tokens 64 --output-tokens 64 \
    --ignore-eos --seed 7 -q --json "$out/$1.json" > "$out/$1.txt"
  echo "$1: $(node -e '
    const r = require(process.argv[1]);
    const f = (s) => `${s.p50.toFixed(0)}/${s.p99.toFixed(0)} ms`;
    console.log(`${r.output_throughput.toFixed(1)} output tokens/s | ITL p50/p99 ${f(r.itl_ms)} | TTFT p50/p99 ${f(r.ttft_ms)} | ` +
                `ok ${r.requests_ok}/${r.requests_ok + r.requests_failed}`);' "$out/$1.json")"
}

: > "$out/swaps.log"
load warmup > /dev/null
for round in $(seq "$rounds"); do
  load "r$round-steady"
  swap_loop &
  swapper=$!
  load "r$round-swapping"
  kill $swapper; wait $swapper 2>/dev/null || true; swapper=""
  echo "r$round swaps so far: $(grep -c . "$out/swaps.log") admin calls, $(grep -c 'still draining' "$out/swaps.log" || true) kvcache swaps refused while the previous drained, $(grep -v 'still draining' "$out/swaps.log" | grep -c 'tokenhost admin:' || true) other refusals"
done

# Swap latency per slot (admin call -> first step on the new plugin), as the server logged each one.
grep "first step on the new" "$out/serve.log" | sed -E 's/.*new ([a-z_]+) plugin ([0-9.]+) ms.*/\1 \2/' > "$out/latencies.txt" || true
node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map((l) => l.split(" "));
  const by = {};
  for (const [slot, ms] of rows) (by[slot] = by[slot] || []).push(Number(ms));
  for (const [slot, v] of Object.entries(by)) {
    v.sort((a, b) => a - b);
    console.log(`swap latency ${slot} (server log): n ${v.length}, median ${v[v.length >> 1].toFixed(1)} ms, max ${v[v.length - 1].toFixed(1)} ms`);
  }' "$out/latencies.txt"
kill -TERM $pid; wait $pid || true; pid=""
