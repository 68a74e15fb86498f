#!/usr/bin/env bash
# How serving throughput scales with concurrent streams under one load: 64-token prompts, 128 tokens
# out (end-of-text ignored), scheduler.continuous, the 110M Q8_0 shape of run.sh, on one server; for
# each of STREAMS (default 1 2 4 8 16 32 64) it sends 3 x streams requests, the bench's closed loop
# keeping that many in flight, and prints output tokens/s, its ratio to one stream, and TTFT / ITL.
# Rounds (ROUNDS, default 2) repeat the sweep, upward then downward, so that a drift of the machine
# does not read as scaling; the table in bench/RESULTS.md takes the median per stream count.
# Usage: bench/serving/sweep.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]   (KV_DTYPE=f32 for an f32 KV cache)
set -euo pipefail
build=${1:-build}
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-serving-sweep}
rounds=${ROUNDS:-2}
streams=(${STREAMS:-1 2 4 8 16 32 64})
kv_dtype=${KV_DTYPE:-f16}
here=$(cd "$(dirname "$0")" && pwd)
tokenhost="$build/bin/tokenhost"
source "$here/../lib.sh"
mkdir -p "$models" "$out"
model=$(bench_model 110M q8_0)
machine_line

pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; true' EXIT
sed -e "s|@MODEL@|$model|" -e "s|@SCHEDULER@|scheduler.continuous|" -e "s|@KV_DTYPE@|$kv_dtype|" \
  "$here/manifest.toml.in" > "$out/serve.toml"
start_server "$out/serve.toml" "$out/serve.log"

for round in $(seq "$rounds"); do
  order=("${streams[@]}")
  if (( round % 2 == 0 )); then order=($(printf '%s\n' "${streams[@]}" | tac)); fi
  for c in "${order[@]}"; do
    "$tokenhost" bench --url "http://127.0.0.1:$gw" -c "$c" -n $((3 * c)) --prompt-tokens 64 --output-tokens 128 \
      --ignore-eos --seed 7 -q --json "$out/r$round-c$c.json" > /dev/null
  done
done
kill -TERM $pid
wait $pid || true
pid=""

node - "$out" "$rounds" "${streams[@]}" <<'JS'
const [dir, rounds, ...streams] = process.argv.slice(2);
const median = (v) => {
  const s = [...v].sort((a, b) => a - b), m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const read = (r, c) => require(`${dir}/r${r}-c${c}.json`);
let one = null;
console.log("| streams | output tokens/s | vs 1 stream | TTFT p50 (ms) | ITL p50 (ms) | per round | ok |");
console.log("|---|---|---|---|---|---|---|");
for (const c of streams) {
  const runs = Array.from({ length: Number(rounds) }, (_, i) => read(i + 1, c));
  const tput = median(runs.map((r) => r.output_throughput));
  if (one === null) one = tput;
  const ok = runs.reduce((n, r) => n + r.requests_ok, 0), all = runs.reduce((n, r) => n + r.requests_ok + r.requests_failed, 0);
  console.log(`| ${c} | ${tput.toFixed(1)} | ${(tput / one).toFixed(2)}x | ${median(runs.map((r) => r.ttft_ms.p50)).toFixed(0)} | ` +
              `${median(runs.map((r) => r.itl_ms.p50)).toFixed(1)} | ${runs.map((r) => r.output_throughput.toFixed(1)).join(" / ")} | ${ok}/${all} |`);
}
JS
