#!/usr/bin/env bash
# Many models as one (issue 30), mechanism measurements on stories260K and its q4_0 copy (models/):
#  1. Cascade thresholds: the group of manifests/cascade.toml (q4 at cost 0.3, full at 1.0) answers
#     56 greedy prompts (MAX_TOKENS tokens) under router.cascade at each threshold of THRESHOLDS
#     (mean token log-probability of the q4 answer) and under the two fixed choices, always small and
#     always large (router.cost_quality with the quality needed set to 0 or to 1). Per configuration:
#     the share the small model answered, the cost against always large, the share of answers equal to
#     always large's, the wall time of the pass (median of ROUNDS rounds, configurations in reversed
#     order every other round, the router swapped live in one server), and how much of always large's
#     answer each answer shares from its start (common leading characters over always large's length,
#     the mean over prompts).
#  2. Response cache: one engine of stories260K answers a Zipf load (REQUESTS streamed greedy requests
#     over DISTINCT prompts, exponent ZIPF_S, seed 7, CONCURRENCY at a time) behind router.cache
#     (swapped in fresh, so empty, before each run) or router.round_robin: hit rate, TTFT p50/p99,
#     wall time, medians of ROUNDS rounds, alternating.
# Usage: bench/fusion/run.sh [BUILD_DIR] [OUT_DIR]; environment (defaults): MAX_TOKENS=48
#   THRESHOLDS="-0.5 -0.6 -0.65 -0.7 -0.75 -0.8 -0.9" ROUNDS=3 REQUESTS=300 DISTINCT=60 ZIPF_S=1.0 CONCURRENCY=4
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-build}" && pwd)
out=${2:-/tmp/tokenhost-fusion-bench}
tokenhost=$build/bin/tokenhost
models=$out/models
max_tokens=${MAX_TOKENS:-48}
thresholds=${THRESHOLDS:-"-0.5 -0.6 -0.65 -0.7 -0.75 -0.8 -0.9"}
rounds=${ROUNDS:-3}
requests=${REQUESTS:-300}
distinct=${DISTINCT:-60}
zipf_s=${ZIPF_S:-1.0}
concurrency=${CONCURRENCY:-4}
mkdir -p "$out" "$models"
source "$here/../lib.sh"
export TOKENHOST_ADMIN_TOKEN=fusion-bench-token-0123456789abcdef
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; true' EXIT
machine_line | tee "$out/machine.txt"

# --- 1. Cascade thresholds ---
sed -e 's|127.0.0.1:8080|127.0.0.1:0|; s|127.0.0.1:8081|127.0.0.1:0|' -e "s|\.\./models/|$root/models/|" "$root/manifests/cascade.toml" > "$out/cascade.toml"
start_server "$out/cascade.toml" "$out/cascade.log"
router() { "$tokenhost" admin --url "$admin" router "$@" > /dev/null; }
configs=("small" "large")
for t in $thresholds; do configs+=("t$t"); done
for round in $(seq "$rounds"); do
  order=("${configs[@]}")
  if [ $((round % 2)) -eq 0 ]; then order=($(printf '%s\n' "${configs[@]}" | tac)); fi
  for c in "${order[@]}"; do
    case $c in
      small) router router.cost_quality --set min_quality=0 --set max_quality=0 ;;
      large) router router.cost_quality --set min_quality=1 --set max_quality=1 ;;
      t*) router router.cascade --set "threshold=${c#t}" --set cache=false ;;
    esac
    node "$here/load.js" pass "$gw" stories "$out/cascade-$c-$round.json" "$concurrency" "$max_tokens"
  done
done
kill $pid; wait $pid 2>/dev/null || true; pid=""
node -e '
  const [dir, rounds, ...configs] = process.argv.slice(1);
  const load = (c, r) => require(`${dir}/cascade-${c}-${r}.json`);
  const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const large = load("large", 1).results, sum = (rs) => rs.reduce((a, r) => a + r.cost, 0);
  const shared = (a, b) => { let k = 0; while (k < a.length && k < b.length && a[k] === b[k]) ++k; return b.length ? k / b.length : 1; };
  console.log("| configuration | answered by q4 | cost vs always large | answers equal to always large | leading text shared with always large | wall s (median) |");
  console.log("|---|---|---|---|---|---|");
  for (const c of configs) {
    const rs = load(c, 1).results;
    for (let r = 2; r <= +rounds; ++r)  // greedy: every round gives the same answers
      load(c, r).results.forEach((x, i) => { if (x.text !== rs[i].text) throw new Error(`${c}: round ${r} answered prompt ${i} otherwise`); });
    const small = rs.filter((x) => x.model === "q4").length, same = rs.filter((x, i) => x.text === large[i].text).length;
    const wall = median(Array.from({ length: +rounds }, (_, r) => load(c, r + 1).wall_ms / 1000));
    const name = c === "small" ? "always small (q4)" : c === "large" ? "always large (full)" : `cascade, threshold ${c.slice(1)}`;
    const lead = rs.reduce((a, x, i) => a + shared(x.text, large[i].text), 0) / rs.length;
    console.log(`| ${name} | ${(100 * small / rs.length).toFixed(0)}% | ${(sum(rs) / sum(large)).toFixed(2)} | ${(100 * same / rs.length).toFixed(0)}% | ${(100 * lead).toFixed(0)}% | ${wall.toFixed(2)} |`);
  }' "$out" "$rounds" "${configs[@]}" | tee "$out/cascade.md"

# --- 2. Response cache ---
cat > "$out/cache.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
[models.stories]
source = "builtin"
name = "stories260K"
[engines.main]
model = "stories"
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 16, n_blocks = 1024 } }
scheduler = { plugin = "scheduler.continuous" }
[router]
plugin = "router.round_robin"
TOML
start_server "$out/cache.toml" "$out/cache.log"
for round in $(seq "$rounds"); do
  order=(cache none)
  [ $((round % 2)) -eq 0 ] && order=(none cache)
  for c in "${order[@]}"; do
    if [ "$c" = cache ]; then router router.cache; else router router.round_robin; fi
    node "$here/load.js" zipf "$gw" stories "$out/zipf-$c-$round.json" "$requests" "$distinct" "$zipf_s" 7 "$concurrency" "$max_tokens"
  done
done
node -e '
  const [dir, rounds] = process.argv.slice(1);
  const load = (c, r) => require(`${dir}/zipf-${c}-${r}.json`);
  const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN; };
  const none = load("none", 1).results;
  console.log("| router | hit rate | TTFT p50 ms | TTFT p99 ms | hits TTFT p50 ms | misses TTFT p50 ms | wall s |");
  console.log("|---|---|---|---|---|---|---|");
  for (const c of ["none", "cache"]) {
    const per = Array.from({ length: +rounds }, (_, r) => load(c, r + 1));
    for (const p of per) p.results.forEach((x, i) => { if (x.text !== none[i].text) throw new Error(`${c}: request ${i} answered otherwise than without the cache`); });
    const m = (f) => median(per.map(f));
    const hits = (p) => p.results.filter((x) => x.cached), misses = (p) => p.results.filter((x) => !x.cached);
    console.log(`| ${c === "cache" ? "router.cache" : "router.round_robin (no cache)"} | ${(100 * m((p) => hits(p).length / p.results.length)).toFixed(0)}% | ` +
      `${m((p) => pct(p.results.map((x) => x.ttft_ms), 0.5)).toFixed(2)} | ${m((p) => pct(p.results.map((x) => x.ttft_ms), 0.99)).toFixed(2)} | ` +
      `${c === "cache" ? m((p) => pct(hits(p).map((x) => x.ttft_ms), 0.5)).toFixed(2) : "-"} | ${m((p) => pct(misses(p).map((x) => x.ttft_ms), 0.5)).toFixed(2)} | ${(m((p) => p.wall_ms) / 1000).toFixed(2)} |`);
  }' "$out" "$rounds" | tee "$out/cache.md"
