#!/usr/bin/env bash
# Serving at 64 streams side by side with llama-server, the same client (`tokenhost bench`) and GGUF
# file (110M Q8_0 of make-model): output tokens/s, TTFT and inter-token latency, and the scheduler's
# trade-off between the last two. Settings:
#   continuous   tokenhost, bench/serving/manifest.toml.in (scheduler.continuous, its defaults)
#   capped       the same with max_prefill_tokens_with_decodes = PREFILL_CAP: prompts take at most
#                that many tokens of a step while others decode (lower ITL, later first tokens)
#   llama        llama-server --parallel 64 -t 2, 256 context tokens per slot (LLAMA_SERVER set only)
# Loads (64 concurrent streams each; every request at temperature 1, the API's default):
#   anchor       ANCHORS.md's llama-server load: 15-token prompts, 128 tokens out, 128 requests (two
#                waves: the second arrives while the first decodes)
#   mixed        bench/serving/run.sh's c64 load: 64-token prompts, 16-128 tokens out, 64 requests
# Both servers are told to avoid the byte tokens 0x80-0xFF (logit_bias -100 on ids 131-258, make-model's
# layout): a random-weight model otherwise now and then emits bytes that are not UTF-8, which
# llama-server's output parser rejects mid-stream ("does not match the expected Content-only format").
# Each round runs every setting, the order reversed every other round; a fresh server per setting and
# round. The table gives medians over ROUNDS rounds. LLAMA_SERVER is the path of a llama-server binary
# built elsewhere (this repository neither fetches nor builds it).
# Usage: bench/serving/vs_llama.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]; environment (defaults):
#   ROUNDS=3  PREFILL_CAP=64  LLAMA_SERVER=(unset)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-vs-llama}
rounds=${ROUNDS:-3}
cap=${PREFILL_CAP:-64}
tokenhost=$build/bin/tokenhost
mkdir -p "$models" "$out"
source "$here/../lib.sh"
model=$(bench_model 110M q8_0)
settings="continuous capped"
[ -n "${LLAMA_SERVER:-}" ] && settings="$settings llama"
body=$(node -e 'const b = {}; for (let i = 131; i <= 258; ++i) b[i] = -100; console.log(JSON.stringify({logit_bias: b}))')

sed -e "s|@MODEL@|$model|" -e "s|@SCHEDULER@|scheduler.continuous|" -e "s|@KV_DTYPE@|f16|" \
  "$here/manifest.toml.in" > "$out/continuous.toml"
sed -e "s|scheduler = { plugin = \"scheduler.continuous\" }|scheduler = { plugin = \"scheduler.continuous\", config = { max_prefill_tokens_with_decodes = $cap } }|" \
  "$out/continuous.toml" > "$out/capped.toml"
grep -q "max_prefill_tokens_with_decodes = $cap" "$out/capped.toml" || { echo "could not write capped.toml"; exit 1; }

pid="" llama_pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; [ -n "$llama_pid" ] && kill $llama_pid 2>/dev/null; true' EXIT

# up SETTING: starts that server; sets url.
up() {
  if [ "$1" = llama ]; then
    start_llama_server "$model" 64 $(( 64 * 256 )) "$out/llama.log"
    url=$llama_url
    return
  fi
  start_server "$out/$1.toml" "$out/$1.log"
  url="http://127.0.0.1:$gw"
}
down() {
  [ -n "$pid" ] && { kill -TERM $pid; wait $pid || true; pid=""; }
  stop_llama_server
  return 0
}

# load NAME FILE: one load against url; fails the run when a request failed.
load() {
  case "$1" in
    anchor) set -- "$2" -n 128 --prompt-tokens 15 --output-tokens 128 ;;
    mixed) set -- "$2" -n 64 --prompt-tokens 64 --output-tokens 16:128 ;;
  esac
  local file=$1; shift
  "$tokenhost" bench --url "$url" -c 64 "$@" --ignore-eos --extra-body "$body" --seed 7 -q --json "$file" > /dev/null
  node -e 'const r = require(process.argv[1]);
    if (r.requests_failed > 0) { console.error(`${process.argv[1]}: ${r.requests_failed} requests failed`); process.exit(1); }' "$file"
}

machine_line
for round in $(seq "$rounds"); do
  order=$settings
  [ $(( round % 2 )) -eq 0 ] && order=$(tr ' ' '\n' <<<"$order" | tac | xargs)
  for setting in $order; do
    up "$setting"
    for l in anchor mixed; do
      load $l "$out/$setting-$l-r$round.json"
      echo "round $round $setting $l: $(node -e 'const r = require(process.argv[1]);
        console.log(`${r.output_throughput.toFixed(1)} tokens/s, TTFT p50 ${r.ttft_ms.p50.toFixed(0)} p99 ${r.ttft_ms.p99.toFixed(0)} ms, ` +
                    `ITL p50 ${r.itl_ms.p50.toFixed(1)} p99 ${r.itl_ms.p99.toFixed(1)} ms`)' "$out/$setting-$l-r$round.json")"
    done
    down
  done
done

node -e '
  const fs = require("fs");
  const [dir, settings, rounds] = [process.argv[1], process.argv[2].split(" "), +process.argv[3]];
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
  console.log("| load | setting | tokens/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 |");
  console.log("| --- | --- | --- | --- | --- | --- | --- |");
  for (const l of ["anchor", "mixed"])
    for (const s of settings) {
      const rs = [];
      for (let r = 1; r <= rounds; ++r) rs.push(JSON.parse(fs.readFileSync(`${dir}/${s}-${l}-r${r}.json`)));
      const m = (f) => median(rs.map(f));
      console.log(`| ${l} | ${s} | ${m((r) => r.output_throughput).toFixed(1)} | ${m((r) => r.ttft_ms.p50).toFixed(0)} ms | ` +
                  `${m((r) => r.ttft_ms.p99).toFixed(0)} ms | ${m((r) => r.itl_ms.p50).toFixed(1)} ms | ${m((r) => r.itl_ms.p99).toFixed(1)} ms |`);
    }' "$out" "$settings" "$rounds"
