#!/usr/bin/env bash
# Prefix caching on the shared-prefix load of issue 16 (ANCHORS.md's llama-server figures): REQUESTS
# requests, CONCURRENCY at a time, each prompt PROMPT_TOKENS tokens of the served model long (`tokenhost
# bench` cuts its words to that many through the server's /tokenize) of which SHARED_FRACTION is one
# prefix common to all (480 of 500 tokens by default) and the rest a distinct tail, OUTPUT_TOKENS
# greedy tokens out, through `tokenhost bench` (the same client for every server). Settings:
#   paged          tokenhost engine `paged` (kvcache.paged): every prompt computed whole
#   prefix         tokenhost engine `prefix` (kvcache.prefix), its cache flushed before the run (cold:
#                  the first CONCURRENCY prompts arrive before the prefix is computed)
#   llama-off      llama-server with "cache_prompt": false (only with LLAMA_SERVER set)
#   llama-on       llama-server with its per-slot prompt cache ("cache_prompt": true), restarted before
#                  the run (cold, as `prefix`)
# llama-server runs with --parallel CONCURRENCY, -t 2, the same GGUF; LLAMA_SERVER is the path of a
# llama-server binary built elsewhere (this repository neither fetches nor builds it).
# Each round runs every setting, the order reversed every other round; the table shows medians of
# ROUNDS rounds: TTFT p50 and p99, wall time, and for `prefix` the prompt tokens served from the cache.
# Usage: bench/prefix/run.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]; environment (defaults):
#   MODEL=110M:q8_0  REQUESTS=32  CONCURRENCY=8  PROMPT_TOKENS=500  SHARED_FRACTION=0.96
#   OUTPUT_TOKENS=16  ROUNDS=5  LLAMA_SERVER=(unset)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-prefix-bench}
tokenhost=$build/bin/tokenhost
model=${MODEL:-110M:q8_0}
requests=${REQUESTS:-32}
concurrency=${CONCURRENCY:-8}
prompt_tokens=${PROMPT_TOKENS:-500}
shared=${SHARED_FRACTION:-0.96}
output_tokens=${OUTPUT_TOKENS:-16}
rounds=${ROUNDS:-5}
mkdir -p "$models" "$out"
source "$here/../lib.sh"
export TOKENHOST_ADMIN_TOKEN=prefix-bench-token-0123456789abcdef
pid="" llama_pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; [ -n "$llama_pid" ] && kill $llama_pid 2>/dev/null; true' EXIT

settings="paged prefix"
[ -n "${LLAMA_SERVER:-}" ] && settings="$settings llama-off llama-on"
file=$(bench_model "${model%%:*}" "${model##*:}")
sed -e "s|@MODEL@|$file|" "$here/manifest.toml.in" > "$out/manifest.toml"
start_server "$out/manifest.toml" "$out/serve.log"

# llama_start: a fresh llama-server on the same file (its slots' caches empty); sets llama_url.
llama_start() {
  stop_llama_server
  start_llama_server "$file" "$concurrency" $(( concurrency * 1024 )) "$out/llama.log"
}

# cached_tokens: the prefix engine's prompt tokens served from its cache so far.
cached_tokens() {
  "$tokenhost" admin --url "$admin" --json status | node -e '
    let t = ""; process.stdin.on("data", (d) => (t += d)).on("end", () => {
      console.log(JSON.parse(t).engines.find((e) => e.name === "prefix").prefix_cache.cached_tokens);
    });'
}

# run SETTING NAME: one load; prints "ttft_p50_ms ttft_p99_ms wall_s".
run() {
  local url="http://127.0.0.1:$gw" model_name="" body='{"temperature": 0}'
  case "$1" in
    paged) model_name=bench-paged ;;
    prefix) model_name=bench-prefix; "$tokenhost" admin --url "$admin" flush-prefix-cache prefix > /dev/null ;;
    llama-off) llama_start; url=$llama_url; body='{"temperature": 0, "cache_prompt": false}' ;;
    llama-on) llama_start; url=$llama_url; body='{"temperature": 0, "cache_prompt": true}' ;;
  esac
  "$tokenhost" bench --url "$url" ${model_name:+--model "$model_name"} -c "$concurrency" -n "$requests" \
    --prompt-tokens "$prompt_tokens" --shared-prefix-fraction "$shared" --output-tokens "$output_tokens" --ignore-eos \
    --extra-body "$body" --seed 11 -q --json "$out/$2.json" > "$out/$2.txt"
  node -e 'const r = require(process.argv[1]);
    if (r.requests_failed > 0) { console.error(`${r.requests_failed} requests failed`); process.exit(1); }
    console.log(r.ttft_ms.p50.toFixed(1), r.ttft_ms.p99.toFixed(1), r.wall_time_s.toFixed(2));' "$out/$2.json"
  # run's caller reads it through a process substitution, a subshell: the llama-server it started is
  # stopped here, where its pid is known (the caller's llama_pid never is).
  stop_llama_server
}

machine_line
printf 'setting\tround\tttft_p50_ms\tttft_p99_ms\twall_s\tcached_tokens\n' > "$out/runs.tsv"
for round in $(seq "$rounds"); do
  order=$settings
  [ $(( round % 2 )) -eq 0 ] && order=$(tr ' ' '\n' <<<"$order" | tac | xargs)
  for setting in $order; do
    c0=$(cached_tokens)
    read -r p50 p99 wall < <(run "$setting" "$setting-r$round")
    c1=$(cached_tokens)
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$setting" "$round" "$p50" "$p99" "$wall" $(( c1 - c0 )) >> "$out/runs.tsv"
    echo "round $round $setting: TTFT p50 $p50 ms, p99 $p99 ms, wall $wall s, cached tokens $(( c1 - c0 ))" >&2
  done
done
stop_llama_server

node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").slice(1).map((l) => l.split("\t"));
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
  const by = {};
  for (const [setting, , p50, p99, wall, cached] of rows) (by[setting] ??= []).push({ p50: +p50, p99: +p99, wall: +wall, cached: +cached });
  const paged = median(by.paged.map((r) => r.p50));
  console.log("| setting | TTFT p50 ms (median) | TTFT p99 ms | wall s | paged p50 / this p50 | prompt tokens from the cache | runs |");
  console.log("|---|---|---|---|---|---|---|");
  for (const [s, rs] of Object.entries(by)) {
    const p50 = median(rs.map((r) => r.p50));
    console.log(`| ${s} | ${p50.toFixed(1)} | ${median(rs.map((r) => r.p99)).toFixed(1)} | ${median(rs.map((r) => r.wall)).toFixed(2)} | ` +
                `${(paged / p50).toFixed(1)}x | ${s === "prefix" ? median(rs.map((r) => r.cached)) : "-"} | ${rs.length} |`);
  }' "$out/runs.tsv"
