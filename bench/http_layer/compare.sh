#!/usr/bin/env bash
# Two builds' gateways side by side on the same engine (110M Q8_0, scheduler.continuous, the serving
# benchmarks' deployment): ANCHORS.md's load (15-token prompts, 128 tokens out) at 8 and 64 concurrent
# streams, rounds alternating the builds, every figure per round; then the gateway's cost for the
# second build (one stream through HTTP against `tokenhost generate` in process, alternating pairs).
# Both servers are driven by the second build's `tokenhost bench`, so only the servers differ.
# Usage: bench/http_layer/compare.sh BUILD_A BUILD_B [MODEL_DIR] [OUT_DIR]   (ROUNDS=3)
set -euo pipefail
build_a=$1
build_b=$2
models=${3:-/tmp/tokenhost-bench-models}
out=${4:-/tmp/tokenhost-http-layer-bench}
rounds=${ROUNDS:-3}
here=$(cd "$(dirname "$0")" && pwd)
tokenhost="$build_b/bin/tokenhost"  # the client, make-model and generate
source "$here/../lib.sh"
mkdir -p "$models" "$out"
model=$(bench_model 110M q8_0)
machine_line

pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; true' EXIT
sed -e "s|@MODEL@|$model|" -e "s|@SCHEDULER@|scheduler.continuous|" -e "s|@KV_DTYPE@|f16|" \
  "$here/../serving/manifest.toml.in" > "$out/serve.toml"
load() {  # load NAME CONCURRENCY
  "$tokenhost" bench --url "http://127.0.0.1:$gw" -c "$2" -n $((2 * $2)) --prompt-tokens 15 --output-tokens 128 \
    --ignore-eos --seed 7 -q --json "$out/$1.json" > /dev/null
  echo "$1: $(node -e '
    const r = require(process.argv[1]);
    console.log(`${r.output_throughput.toFixed(1)} output tokens/s | TTFT p50/p99 ${r.ttft_ms.p50.toFixed(0)}/${r.ttft_ms.p99.toFixed(0)} ms | ` +
                `ITL p50 ${r.itl_ms.p50.toFixed(1)} ms | ok ${r.requests_ok}/${r.requests_ok + r.requests_failed}`);' "$out/$1.json")"
}
for round in $(seq "$rounds"); do
  for side in a b; do
    build=$build_a
    [ $side = b ] && build=$build_b
    # The server of this side, the client of side b.
    "$build/bin/tokenhost" serve "$out/serve.toml" > "$out/serve-$side.log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do grep -q "gateway listening" "$out/serve-$side.log" && break; sleep 0.1; done
    gw=$(grep "gateway listening" "$out/serve-$side.log" | sed -E 's/.*listening on [0-9.]+:([0-9]+),.*/\1/')
    load "r$round-$side-c8" 8
    load "r$round-$side-c64" 64
    kill -TERM $pid; wait $pid || true; pid=""
  done
done

prompt=$(for i in $(seq 64); do echo -n "word "; done)
start_server "$out/serve.toml" "$out/serve-b.log"
for pair in 1 2 3 4 5; do
  "$tokenhost" bench --url "http://127.0.0.1:$gw" -c 1 -n 2 --prompt-tokens 64 --output-tokens 128 --ignore-eos \
    --seed 7 -q --json "$out/gateway.json" > /dev/null
  http=$(node -e 'console.log((1000 / require(process.argv[1]).itl_ms.mean).toFixed(1))' "$out/gateway.json")
  gen=$("$tokenhost" generate -m "$model" -p "$prompt" -n 128 --temperature 1 2>&1 >/dev/null | grep decode \
        | sed -E 's/.*\(([0-9.]+) tokens.*/\1/')
  echo "gateway pair $pair: HTTP $http tokens/s, generate $gen tokens/s"
done
kill -TERM $pid; wait $pid || true; pid=""
