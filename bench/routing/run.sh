#!/usr/bin/env bash
# Cache-aware routing on a multi-turn chat load (issue 16): two engines with prefix caches
# (kvcache.prefix) behind router.round_robin or router.prefix_affinity, swapped live between runs in one
# server. The load is `tokenhost bench --turns`: CONCURRENCY conversations at a time, each of TURNS
# turns; a conversation's first prompt is PROMPT_TOKENS words (about two tokens a word with make-model's
# vocabulary), each later turn sends the conversation so far (earlier prompts and answers) and
# TURN_TOKENS new words; OUTPUT_TOKENS greedy tokens out; REQUESTS turns in all. Before each run both
# engines' caches are flushed and the router is swapped in. Each round runs both routers, the order
# reversed every other round; the table shows medians of ROUNDS rounds: the prefix-cache hit rate over
# all turns and over the later turns (lookups that found a cached prefix), the prompt tokens served
# from the caches, TTFT p50 and p99 over all turns and over the later turns, wall time.
# Usage: bench/routing/run.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]; environment (defaults):
#   MODEL=110M:q8_0  REQUESTS=64  CONCURRENCY=8  TURNS=4  PROMPT_TOKENS=150  TURN_TOKENS=16:32
#   OUTPUT_TOKENS=16:48  BLOCKS=1024  ROUNDS=3
# Output and message lengths vary (LO:HI) so that conversations do not fall into lockstep: with equal
# lengths and an even concurrency, round robin would send each conversation to the same engine every turn.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-routing-bench}
tokenhost=$build/bin/tokenhost
model=${MODEL:-110M:q8_0}
requests=${REQUESTS:-64}
concurrency=${CONCURRENCY:-8}
turns=${TURNS:-4}
prompt_tokens=${PROMPT_TOKENS:-150}
turn_tokens=${TURN_TOKENS:-16:32}
output_tokens=${OUTPUT_TOKENS:-16:48}
blocks=${BLOCKS:-1024}
rounds=${ROUNDS:-3}
mkdir -p "$models" "$out"
source "$here/../lib.sh"
export TOKENHOST_ADMIN_TOKEN=routing-bench-token-0123456789abcdef
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; true' EXIT

file=$(bench_model "${model%%:*}" "${model##*:}")
sed -e "s|@MODEL@|$file|" -e "s|@BLOCKS@|$blocks|" "$here/manifest.toml.in" > "$out/manifest.toml"
start_server "$out/manifest.toml" "$out/serve.log"

# prefix_counts: lookups, hits and cached tokens summed over both engines, so far.
prefix_counts() {
  "$tokenhost" admin --url "$admin" --json status | node -e '
    let t = ""; process.stdin.on("data", (d) => (t += d)).on("end", () => {
      const s = { lookups: 0, hits: 0, cached_tokens: 0 };
      for (const e of JSON.parse(t).engines) for (const k in s) s[k] += e.prefix_cache[k];
      console.log(s.lookups, s.hits, s.cached_tokens);
    });'
}

# run ROUTER NAME: one load; prints "ttft_p50 ttft_p99 later_p50 later_p99 wall_s".
run() {
  for e in e1 e2; do "$tokenhost" admin --url "$admin" flush-prefix-cache "$e" > /dev/null; done
  "$tokenhost" admin --url "$admin" router "$1" > /dev/null
  "$tokenhost" bench --url "http://127.0.0.1:$gw" -c "$concurrency" -n "$requests" --turns "$turns" \
    --prompt-tokens "$prompt_tokens" --turn-tokens "$turn_tokens" --output-tokens "$output_tokens" --ignore-eos \
    --extra-body '{"temperature": 0}' --seed 11 -q --json "$out/$2.json" > "$out/$2.txt"
  node -e 'const r = require(process.argv[1]);
    if (r.requests_failed > 0) { console.error(`${r.requests_failed} requests failed`); process.exit(1); }
    const f = (x) => x.toFixed(1);
    console.log(f(r.ttft_ms.p50), f(r.ttft_ms.p99), f(r.ttft_later_turns_ms.p50), f(r.ttft_later_turns_ms.p99), r.wall_time_s.toFixed(2));' "$out/$2.json"
}

machine_line
printf 'router\tround\tlookups\thits\tcached_tokens\tttft_p50_ms\tttft_p99_ms\tlater_p50_ms\tlater_p99_ms\twall_s\n' > "$out/runs.tsv"
for round in $(seq "$rounds"); do
  order="router.round_robin router.prefix_affinity"
  [ $(( round % 2 )) -eq 0 ] && order="router.prefix_affinity router.round_robin"
  for router in $order; do
    read -r l0 h0 c0 < <(prefix_counts)
    read -r p50 p99 lp50 lp99 wall < <(run "$router" "${router#router.}-r$round")
    read -r l1 h1 c1 < <(prefix_counts)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$router" "$round" $(( l1 - l0 )) $(( h1 - h0 )) $(( c1 - c0 )) \
      "$p50" "$p99" "$lp50" "$lp99" "$wall" >> "$out/runs.tsv"
    echo "round $round $router: $(( h1 - h0 ))/$(( l1 - l0 )) hits, $(( c1 - c0 )) cached tokens, TTFT p50 $p50 p99 $p99 ms," \
      "later turns p50 $lp50 p99 $lp99 ms, wall $wall s" >&2
  done
done

node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").slice(1).map((l) => l.split("\t"));
  const turns = +process.argv[2];
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
  const by = {};
  for (const [router, , lookups, hits, cached, p50, p99, lp50, lp99, wall] of rows)
    (by[router] ??= []).push({ lookups: +lookups, hits: +hits, cached: +cached, p50: +p50, p99: +p99, lp50: +lp50, lp99: +lp99, wall: +wall });
  console.log("| router | hit rate, all turns | hit rate, turns 2+ | prompt tokens from the caches | TTFT p50 ms | TTFT p99 ms | turns 2+ p50 ms | turns 2+ p99 ms | wall s | runs |");
  console.log("|---|---|---|---|---|---|---|---|---|---|");
  for (const [router, rs] of Object.entries(by)) {
    const m = (k) => median(rs.map((r) => r[k]));
    // Turns 2+: the lookups of first turns (one per conversation) find nothing of their own.
    const later = median(rs.map((r) => r.hits / (r.lookups * (turns - 1) / turns)));
    console.log(`| ${router} | ${(100 * median(rs.map((r) => r.hits / r.lookups))).toFixed(0)}% | ${(100 * later).toFixed(0)}% | ` +
                `${m("cached")} | ${m("p50").toFixed(1)} | ${m("p99").toFixed(1)} | ${m("lp50").toFixed(1)} | ${m("lp99").toFixed(1)} | ` +
                `${m("wall").toFixed(2)} | ${rs.length} |`);
  }' "$out/runs.tsv" "$turns"
