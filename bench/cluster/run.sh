#!/usr/bin/env bash
# Remote against local engines on one machine (issue 31): a head with an engine of its own ("local")
# and a worker with the same engine ("main@worker-1" to the head), one model, the same plugins, mutual
# TLS between them. An A/B experiment on the head lets each request pick its engine
# ("tokenhost": {"arm": ...}), so both halves run through the same gateway and router, in one run:
# what differs is the hop over the cluster link (the worker's gateway is not used). Each round runs a
# `tokenhost bench` load on each arm, the order reversed every other round; the table shows medians of
# ROUNDS rounds of TTFT p50, ITL p50 (the gap between streamed tokens), end-to-end p50 and output
# tokens/s, streamed, greedy, ignore_eos.
# Usage: bench/cluster/run.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]; environment (defaults):
#   MODEL=builtin (stories260K; or PRESET:TYPE of make-model, e.g. 110M:q8_0)  REQUESTS=64
#   CONCURRENCY=1,8  PROMPT_TOKENS=64  OUTPUT_TOKENS=64  ROUNDS=3
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-cluster-bench}
tokenhost=$build/bin/tokenhost
model=${MODEL:-builtin}
requests=${REQUESTS:-64}
concurrencies=${CONCURRENCY:-1,8}
prompt_tokens=${PROMPT_TOKENS:-64}
output_tokens=${OUTPUT_TOKENS:-64}
rounds=${ROUNDS:-3}
mkdir -p "$models" "$out"
source "$here/../lib.sh"
export TOKENHOST_ADMIN_TOKEN=cluster-bench-token-0123456789abcdef
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

if [ "$model" = builtin ]; then
  model_toml='source = "builtin"
name = "stories260K"'
else
  model_toml="source = \"gguf\"
path = \"$(bench_model "${model%%:*}" "${model##*:}")\""
fi
engine_toml() {  # engine_toml NAME: an [engines.NAME] table of the model, as the default manifest's
  cat <<TOML
[engines.$1]
model = "m"
device = "cpu"
[engines.$1.attention]
plugin = "attention.cpu_flash"
[engines.$1.kvcache]
plugin = "kvcache.paged"
config = { block_size = 16, n_blocks = 2048 }
[engines.$1.scheduler]
plugin = "scheduler.continuous"
TOML
}
port=$((20000 + RANDOM % 20000))
rm -rf "$out/certs"
"$tokenhost" cluster init "$out/certs" --nodes head,worker-1 > /dev/null
cat > "$out/worker-1.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
[cluster]
node = "worker-1"
certs = "$out/certs"
listen = "127.0.0.1:$port"
[models.m]
$model_toml
$(engine_toml main)
TOML
cat > "$out/head.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
[cluster]
node = "head"
certs = "$out/certs"
workers = [{ name = "worker-1", address = "127.0.0.1:$port" }]
[models.m]
$model_toml
$(engine_toml local)
TOML

start_server "$out/worker-1.toml" "$out/worker-1.log"
pids+=("$pid")
start_server "$out/head.toml" "$out/head.log"
pids+=("$pid")
for _ in $(seq 100); do grep -q "engine main@worker-1 .* takes requests" "$out/head.log" && break; sleep 0.1; done
grep -q "engine main@worker-1 .* takes requests" "$out/head.log" || { echo "worker-1 did not join:"; cat "$out/head.log"; exit 1; }
"$tokenhost" admin --url "$admin" ab start where --arm local=local:50 --arm remote=main@worker-1:50 --sticky none \
  --allow-request-choice > /dev/null

# run ARM CONCURRENCY NAME: one load; prints "ttft_p50 itl_p50 e2e_p50 tokens_per_s".
run() {
  "$tokenhost" bench --url "http://127.0.0.1:$gw" -c "$2" -n "$requests" --prompt-tokens "$prompt_tokens" \
    --output-tokens "$output_tokens" --ignore-eos --extra-body "{\"temperature\": 0, \"tokenhost\": {\"arm\": \"$1\"}}" \
    --seed 7 -q --json "$out/$3.json" > "$out/$3.txt"
  node -e 'const r = require(process.argv[1]);
    if (r.requests_failed > 0) { console.error(`${r.requests_failed} requests failed`); process.exit(1); }
    const f = (x) => x.toFixed(3);
    console.log(f(r.ttft_ms.p50), f(r.itl_ms.p50), f(r.e2e_latency_ms.p50), r.output_throughput.toFixed(1));' "$out/$3.json"
}

machine_line
echo "model: $model, $requests requests of $prompt_tokens prompt tokens and $output_tokens output tokens per load"
printf 'arm\tconcurrency\tround\tttft_p50_ms\titl_p50_ms\te2e_p50_ms\ttokens_per_s\n' > "$out/runs.tsv"
run local 1 warmup > /dev/null
run remote 1 warmup > /dev/null
for c in ${concurrencies//,/ }; do
  for round in $(seq "$rounds"); do
    order="local remote"
    [ $(( round % 2 )) -eq 0 ] && order="remote local"
    for arm in $order; do
      read -r ttft itl e2e tps < <(run "$arm" "$c" "$arm-c$c-r$round")
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$arm" "$c" "$round" "$ttft" "$itl" "$e2e" "$tps" >> "$out/runs.tsv"
      echo "concurrency $c round $round $arm: TTFT p50 $ttft ms, ITL p50 $itl ms, e2e p50 $e2e ms, $tps tokens/s" >&2
    done
  done
done

# The medians, and remote against local.
node -e '
const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").slice(1).map((l) => l.split("\t"));
const med = (xs) => { const s = xs.map(Number).sort((a, b) => a - b); return s[(s.length - 1) >> 1]; };
console.log("| concurrency | engine | TTFT p50 ms | ITL p50 ms | e2e p50 ms | output tokens/s |");
console.log("|---|---|---|---|---|---|");
const cs = [...new Set(rows.map((r) => r[1]))];
for (const c of cs) {
  const m = {};
  for (const arm of ["local", "remote"]) {
    const rs = rows.filter((r) => r[0] === arm && r[1] === c);
    m[arm] = [3, 4, 5, 6].map((i) => med(rs.map((r) => r[i])));
    console.log(`| ${c} | ${arm} | ${m[arm].map((x, i) => (i === 3 ? x.toFixed(1) : x.toFixed(2))).join(" | ")} |`);
  }
  const d = m.remote.map((x, i) => x - m.local[i]);
  console.log(`| ${c} | remote - local | ${d[0] >= 0 ? "+" : ""}${d[0].toFixed(2)} | ${d[1] >= 0 ? "+" : ""}${d[1].toFixed(3)} | ${d[2] >= 0 ? "+" : ""}${d[2].toFixed(2)} | ${(100 * m.remote[3] / m.local[3] - 100).toFixed(0)}% |`);
}' "$out/runs.tsv"
