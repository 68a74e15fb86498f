#!/usr/bin/env bash
# Serving benchmarks of the OpenAI gateway with `tokenhost bench`, on the 110M Q8_0 shape (made with
# make-model once): scheduler.continuous against scheduler.static at 16 and 64 concurrent streams,
# single-stream and 8-stream throughput, and the gateway's cost against `tokenhost generate` in
# process. Rounds alternate the schedulers; each figure is reported per round (the tables in
# bench/RESULTS.md take the median). Then, on one more server: the load of ANCHORS.md's llama-server
# figure (8 and 64 streams, 15-token prompts, 128 tokens out) and five alternating pairs of one
# stream through HTTP and `generate` in process (the gateway's cost). KV_DTYPE=f32 runs the engines (and
# generate) on an f32 KV cache instead of the default f16. Usage: bench/serving/run.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]
set -euo pipefail
build=${1:-build}
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-serving-bench}
rounds=${ROUNDS:-3}
kv_dtype=${KV_DTYPE:-f16}
here=$(cd "$(dirname "$0")" && pwd)
tokenhost="$build/bin/tokenhost"
source "$here/../lib.sh"
mkdir -p "$models" "$out"
model=$(bench_model 110M q8_0)
machine_line

prompt=$(for i in $(seq 64); do echo -n "word "; done)  # generate's prompt: 64 words, as the bench's
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; true' EXIT
serve() {  # serve SCHEDULER: starts the server, sets gw
  sed -e "s|@MODEL@|$model|" -e "s|@SCHEDULER@|$1|" -e "s|@KV_DTYPE@|$kv_dtype|" "$here/manifest.toml.in" > "$out/serve.toml"
  start_server "$out/serve.toml" "$out/serve.log"
}
stop() { kill -TERM $pid; wait $pid || true; pid=""; }
load() {  # load NAME CONCURRENCY REQUESTS OUTPUT_TOKENS
  "$tokenhost" bench --url "http://127.0.0.1:$gw" -c "$2" -n "$3" --prompt-tokens 64 --output-tokens "$4" \
    --ignore-eos --seed 7 -q --json "$out/$1.json" > "$out/$1.txt"
  echo "$1: $(node -e '
    const r = require(process.argv[1]);
    const f = (s) => `${s.p50.toFixed(0)}/${s.p99.toFixed(0)} ms`;
    console.log(`${r.output_throughput.toFixed(1)} output tokens/s | TTFT p50/p99 ${f(r.ttft_ms)} | ITL p50/p99 ${f(r.itl_ms)} | ` +
                `ok ${r.requests_ok}/${r.requests_ok + r.requests_failed}`);' "$out/$1.json")"
}

for round in $(seq "$rounds"); do
  for sched in continuous static; do
    serve "scheduler.$sched"
    load "r$round-$sched-c16" 16 32 16:128
    load "r$round-$sched-c64" 64 64 16:128
    stop
  done
  serve scheduler.continuous
  load "r$round-continuous-c1" 1 4 128
  load "r$round-continuous-c8" 8 16 128
  stop
  # In process, the same model, prompt length and sampling (temperature 1, the API's default), one stream.
  "$tokenhost" generate -m "$model" -p "$prompt" -n 128 --temperature 1 --kv-dtype "$kv_dtype" 2>&1 >/dev/null | grep decode \
    | sed "s/^/r$round-generate: /"
done

# ANCHORS.md's llama-server load, then the gateway pairs, on one server.
serve scheduler.continuous
for c in 8 8 8 64 64; do
  "$tokenhost" bench --url "http://127.0.0.1:$gw" -c "$c" -n $((2 * c)) --prompt-tokens 15 --output-tokens 128 \
    --ignore-eos --seed 7 -q --json "$out/anchor-c$c.json" > /dev/null
  echo "anchor-c$c: $(node -e '
    const r = require(process.argv[1]);
    console.log(`${r.output_throughput.toFixed(1)} output tokens/s | TTFT p50 ${r.ttft_ms.p50.toFixed(0)} ms | ` +
                `ITL p50 ${r.itl_ms.p50.toFixed(1)} ms | ok ${r.requests_ok}/${r.requests_ok + r.requests_failed}`);' \
    "$out/anchor-c$c.json")"
done
for pair in 1 2 3 4 5; do
  "$tokenhost" bench --url "http://127.0.0.1:$gw" -c 1 -n 2 --prompt-tokens 64 --output-tokens 128 --ignore-eos \
    --seed 7 -q --json "$out/gateway.json" > /dev/null
  http=$(node -e 'console.log((1000 / require(process.argv[1]).itl_ms.mean).toFixed(1))' "$out/gateway.json")
  gen=$("$tokenhost" generate -m "$model" -p "$prompt" -n 128 --temperature 1 --kv-dtype "$kv_dtype" 2>&1 >/dev/null | grep decode \
        | sed -E 's/.*\(([0-9.]+) tokens.*/\1/')
  echo "gateway pair $pair: HTTP $http tokens/s, generate $gen tokens/s"
done
stop
