#!/usr/bin/env bash
# Structured output's cost per token: the same load with and without a JSON Schema constraint, through
# `tokenhost bench` (one client for every server), at 1 and 16 concurrent streams, on MODEL (a make-model
# shape: 110M has make-model's 32000-token vocabulary). The schema's two free strings keep every
# answer inside the constraint for all OUTPUT_TOKENS (`ignore_eos` for the unconstrained runs): the
# mask of a string's text, where nearly every token is allowed, is the expensive one. Settings:
#   free          tokenhost, no constraint
#   schema        tokenhost, response_format json_schema (constraint.gbnf)
#   llama-free    llama-server, no constraint            (only with LLAMA_SERVER set)
#   llama-schema  llama-server, its `json_schema` field  (only with LLAMA_SERVER set)
# llama-server runs with --parallel CONCURRENCY, -t 2, the same GGUF; LLAMA_SERVER is the path of a
# llama-server binary built elsewhere (this repository neither fetches nor builds it). Each round runs
# every setting, the order reversed every other round; the table shows medians of ROUNDS rounds.
# Usage: bench/structured/run.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]; environment (defaults):
#   MODEL=110M:q8_0  OUTPUT_TOKENS=64  ROUNDS=3  LLAMA_SERVER=(unset)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-structured-bench}
tokenhost=$build/bin/tokenhost
model=${MODEL:-110M:q8_0}
output_tokens=${OUTPUT_TOKENS:-64}
rounds=${ROUNDS:-3}
mkdir -p "$models" "$out"
source "$here/../lib.sh"
pid="" llama_pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; [ -n "$llama_pid" ] && kill $llama_pid 2>/dev/null; true' EXIT

schema='{"type": "object", "properties": {"title": {"type": "string"}, "story": {"type": "string"}}, "required": ["title", "story"], "additionalProperties": false}'
settings="free schema"
[ -n "${LLAMA_SERVER:-}" ] && settings="$settings llama-free llama-schema"
file=$(bench_model "${model%%:*}" "${model##*:}")
sed -e "s|@MODEL@|$file|" "$here/manifest.toml.in" > "$out/manifest.toml"
start_server "$out/manifest.toml" "$out/serve.log"

llama_start() {  # llama_start CONCURRENCY: a llama-server on the same file with that many slots; sets llama_url
  stop_llama_server
  start_llama_server "$file" "$1" $(( $1 * 512 )) "$out/llama.log"
}

# run SETTING CONCURRENCY NAME: one load; prints "output_tok_s itl_p50_ms itl_p99_ms".
run() {
  local url="http://127.0.0.1:$gw" body='{"temperature": 0}' n=$(( $2 == 1 ? 8 : 32 ))
  case "$1" in
    schema) body="{\"temperature\": 0, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"story\", \"schema\": $schema}}}" ;;
    llama-free) llama_start "$2"; url=$llama_url ;;
    llama-schema) llama_start "$2"; url=$llama_url; body="{\"temperature\": 0, \"json_schema\": $schema}" ;;
  esac
  "$tokenhost" bench --url "$url" -c "$2" -n "$n" --prompt-tokens 32 --output-tokens "$output_tokens" --ignore-eos \
    --extra-body "$body" --seed 5 -q --json "$out/$3.json" > "$out/$3.txt" 2> "$out/$3.err"
  node -e 'const r = require(process.argv[1]);
    if (r.requests_failed > 0) { console.error(`${r.requests_failed} requests failed`); process.exit(1); }
    console.log(r.output_throughput.toFixed(1), r.itl_ms.p50.toFixed(2), r.itl_ms.p99.toFixed(2));' "$out/$3.json"
  # run's caller reads it through a process substitution, a subshell: the llama-server it started is
  # stopped here, where its pid is known (the caller's llama_pid never is).
  stop_llama_server
}

machine_line
printf 'setting\tstreams\tround\ttok_s\titl_p50_ms\titl_p99_ms\n' > "$out/runs.tsv"
for round in $(seq "$rounds"); do
  order=$settings
  [ $(( round % 2 )) -eq 0 ] && order=$(tr ' ' '\n' <<<"$order" | tac | xargs)
  for streams in 1 16; do
    for setting in $order; do
      read -r tok_s p50 p99 < <(run "$setting" "$streams" "$setting-c$streams-r$round")
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$setting" "$streams" "$round" "$tok_s" "$p50" "$p99" >> "$out/runs.tsv"
      echo "round $round, $streams streams, $setting: $tok_s tokens/s, ITL p50 $p50 ms, p99 $p99 ms" >&2
    done
  done
done
stop_llama_server
grep "compiled" "$out/serve.log" | head -3 >&2

node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").slice(1).map((l) => l.split("\t"));
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
  const by = {};
  for (const [setting, streams, , tok, p50, p99] of rows) (by[`${setting}@${streams}`] ??= []).push({ tok: +tok, p50: +p50, p99: +p99 });
  console.log("| setting | streams | output tokens/s | ITL p50 ms | ITL p99 ms | tokens/s vs its unconstrained | runs |");
  console.log("|---|---|---|---|---|---|---|");
  for (const [key, rs] of Object.entries(by)) {
    const [setting, streams] = key.split("@");
    const base = by[`${setting.startsWith("llama") ? "llama-free" : "free"}@${streams}`];
    const tok = median(rs.map((r) => r.tok));
    console.log(`| ${setting} | ${streams} | ${tok.toFixed(1)} | ${median(rs.map((r) => r.p50)).toFixed(2)} | ` +
                `${median(rs.map((r) => r.p99)).toFixed(2)} | ${(tok / median(base.map((r) => r.tok))).toFixed(3)} | ${rs.length} |`);
  }' "$out/runs.tsv"
