#!/usr/bin/env bash
# 8-bit KV against f16 KV in the same memory (issue 16): engine `f16` with F16_BLOCKS blocks of 16
# positions and engine `q8` (kv_dtype q8_0) with as many blocks as fit in the same bytes (for heads of
# 64: 128 bytes a head vector in f16, 64 + 2 scales x 4 = 72 in q8_0, 1.78x the blocks), one server.
# For each number of streams in STREAMS, `tokenhost bench` keeps that many requests in flight
# (PROMPT_TOKENS words, about two tokens a word with make-model's vocabulary, OUTPUT_TOKENS greedy
# tokens out, ignore_eos), REQUESTS_PER_STREAM requests per stream; while it runs the engine's
# `tokenhost_sequences_running` gauge is sampled every 0.2 s. Each round runs both engines at each
# stream count, the order reversed every other round; the table shows medians of ROUNDS rounds: the
# most sequences held at once, output tokens/s over the wall time, TTFT p50.
# Usage: bench/kv_q8/run.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]; environment (defaults):
#   MODEL=110M:q8_0  F16_BLOCKS=512  STREAMS="16 64"  PROMPT_TOKENS=64  OUTPUT_TOKENS=128
#   REQUESTS_PER_STREAM=1  ROUNDS=3  HEAD_DIM=64
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-kv-q8-bench}
tokenhost=$build/bin/tokenhost
model=${MODEL:-110M:q8_0}
f16_blocks=${F16_BLOCKS:-512}
streams_list=${STREAMS:-"16 64"}
prompt_tokens=${PROMPT_TOKENS:-64}
output_tokens=${OUTPUT_TOKENS:-128}
per_stream=${REQUESTS_PER_STREAM:-1}
rounds=${ROUNDS:-3}
mkdir -p "$models" "$out"
source "$here/../lib.sh"
export TOKENHOST_ADMIN_TOKEN=kv-q8-bench-token-0123456789abcdef
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; true' EXIT

file=$(bench_model "${model%%:*}" "${model##*:}")
# The same bytes: f16 blocks x (f16 bytes a head vector) / (q8_0 bytes a head vector, scales included).
# HEAD_DIM: the model's (make-model's 110M and 1.1B presets: 64).
head_dim=${HEAD_DIM:-64}
group=32; while [ $(( head_dim % group )) -ne 0 ]; do group=$(( group - 1 )); done
q8_blocks=$(( f16_blocks * head_dim * 2 / (head_dim + head_dim / group * 4) ))
sed -e "s|@MODEL@|$file|" -e "s|@F16_BLOCKS@|$f16_blocks|" -e "s|@Q8_BLOCKS@|$q8_blocks|" "$here/manifest.toml.in" > "$out/manifest.toml"
start_server "$out/manifest.toml" "$out/serve.log"

# run ENGINE STREAMS NAME: one load; prints "peak_running tokens_per_s ttft_p50_ms".
run() {
  local peak_file="$out/$3.peak"
  echo 0 > "$peak_file"
  ( peak=0
    while :; do
      n=$(curl -s "$admin/metrics" | sed -nE "s/^tokenhost_sequences_running\{engine=\"$1\"[^}]*\} ([0-9.]+)$/\1/p" | head -1)
      n=${n%.*}; [ -n "$n" ] && [ "$n" -gt "$peak" ] && { peak=$n; echo "$peak" > "$peak_file"; }
      sleep 0.2
    done ) &
  local sampler=$!
  "$tokenhost" bench --url "http://127.0.0.1:$gw" --model "bench-$1" -c "$2" -n $(( $2 * per_stream )) \
    --prompt-tokens "$prompt_tokens" --output-tokens "$output_tokens" --ignore-eos --extra-body '{"temperature": 0}' \
    --seed 5 -q --json "$out/$3.json" > "$out/$3.txt"
  kill $sampler 2>/dev/null; wait $sampler 2>/dev/null || true
  node -e 'const r = require(process.argv[1]);
    if (r.requests_failed > 0) { console.error(`${r.requests_failed} requests failed`); process.exit(1); }
    console.log(process.argv[2], r.output_throughput.toFixed(1), r.ttft_ms.p50.toFixed(1));' "$out/$3.json" "$(cat "$peak_file")"
}

machine_line
echo "KV pools of the same bytes: f16 $f16_blocks blocks, q8_0 $q8_blocks blocks of 16 positions (heads of $head_dim, groups of $group)"
printf 'engine\tstreams\tround\tpeak_running\ttokens_per_s\tttft_p50_ms\n' > "$out/runs.tsv"
for round in $(seq "$rounds"); do
  order="f16 q8"
  [ $(( round % 2 )) -eq 0 ] && order="q8 f16"
  for streams in $streams_list; do
    for engine in $order; do
      read -r peak tps ttft < <(run "$engine" "$streams" "$engine-$streams-r$round")
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$engine" "$streams" "$round" "$peak" "$tps" "$ttft" >> "$out/runs.tsv"
      echo "round $round, $streams streams, $engine: $peak sequences at once at most, $tps tokens/s, TTFT p50 $ttft ms" >&2
    done
  done
done

node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").slice(1).map((l) => l.split("\t"));
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
  const by = {};
  for (const [engine, streams, , peak, tps, ttft] of rows) (by[streams + " " + engine] ??= []).push({ peak: +peak, tps: +tps, ttft: +ttft });
  console.log("| streams | KV | most sequences at once | output tokens/s | TTFT p50 ms | q8_0 / f16 tokens/s | runs |");
  console.log("|---|---|---|---|---|---|---|");
  for (const [key, rs] of Object.entries(by)) {
    const [streams, engine] = key.split(" ");
    const m = (k) => median(rs.map((r) => r[k]));
    const f16 = by[streams + " f16"];
    const ratio = engine === "q8" && f16 ? (m("tps") / median(f16.map((r) => r.tps))).toFixed(2) + "x" : "-";
    console.log(`| ${streams} | ${engine === "q8" ? "q8_0" : "f16"} | ${m("peak")} | ${m("tps").toFixed(1)} | ${m("ttft").toFixed(1)} | ${ratio} | ${rs.length} |`);
  }' "$out/runs.tsv"
