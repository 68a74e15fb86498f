#!/usr/bin/env bash
# An A/B experiment on generated load: two engines of one server sharing one model, the requests spread
# evenly over the arms (sticky_key = "none"), 16 concurrent streams from `tokenhost bench`; then the
# experiment's report (`tokenhost admin --json ab report`). Each round starts a fresh server. Both arms
# see the same moment of the machine, which makes this the steadiest comparison on a VM whose speed
# moves between runs.
#   COMPARE=schedulers (default): scheduler.static (arm a, the baseline) against scheduler.continuous (b)
#   COMPARE=kv_dtype: an f32 KV cache (a) against an f16 one (b), both scheduler.continuous
#   COMPARE=speculation: scheduler.continuous without (a) and with spec_decode.ngram (b); the report
#     shows arm b's drafts and acceptance beside the latencies
#   COMPARE=speculation-oracle: the same with the bench proposer spec_decode.oracle (b) drafting 4 tokens
#     at 80% acceptance per token (ORACLE_RATE, ORACLE_LEN), greedy requests; a fill pass through a
#     server of the oracle alone first shows it every request's greedy continuation
#   COMPARE=prefix-cache: kvcache.paged (a) against kvcache.prefix (b) on the shared-prefix load of
#     bench/prefix (250-word prompts, 96% of them one prefix common to all, 16 tokens out); the report
#     shows each arm's prefix_cache (lookups, hits, tokens served from the cache)
# The arms share the cores and each engine batches only its own requests: an arm with more requests in
# flight runs bigger steps and its latencies grow with that, so small effects (as the KV type's) are
# read with the arms' request counts beside them.
# Usage: bench/ab/run.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]   (ROUNDS, REQUESTS override the defaults)
set -euo pipefail
build=${1:-build}
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-ab-bench}
rounds=${ROUNDS:-3}
requests=${REQUESTS:-64}
tokenhost="$build/bin/tokenhost"
source "$(dirname "$0")/../lib.sh"
mkdir -p "$models" "$out"
model=$(bench_model 110M q8_0)
machine_line
export TOKENHOST_ADMIN_TOKEN=ab-bench-admin-token-0123456789

compare=${COMPARE:-schedulers}
engine() {  # engine NAME SCHEDULER KV_DTYPE [SPEC_DECODE: the slot's inline table's contents] [KVCACHE]
  printf '[engines.%s]\nmodel = "m"\nmax_step_tokens = 512\nmax_step_seqs = 64\nkv_dtype = "%s"\n' "$1" "$3"
  printf 'attention = { plugin = "attention.cpu_flash" }\n'
  printf 'kvcache = { plugin = "%s", config = { block_size = 16, n_blocks = 1600 } }\n' "${5:-kvcache.paged}"
  [ -n "${4:-}" ] && printf 'spec_decode = { %s }\n' "$4"
  printf 'scheduler = { plugin = "%s" }\n\n' "$2"
}
case $compare in
  schedulers) arm_a=static arm_b=continuous ;;
  kv_dtype) arm_a=f32 arm_b=f16 ;;
  speculation) arm_a=plain arm_b=ngram ;;
  speculation-oracle) arm_a=plain arm_b=oracle ;;
  prefix-cache) arm_a=paged arm_b=prefix ;;
  *) echo "COMPARE must be schedulers, kv_dtype, speculation, speculation-oracle or prefix-cache, not '$compare'"; exit 1 ;;
esac
echo "comparing $compare: arm a = $arm_a, arm b = $arm_b"
# The oracle: what it saw in the fill pass, in a file every instance reads.
cont="$out/continuations.bin"
oracle="plugin = \"spec_decode.oracle\", config = { continuations = \"$cont\", accept_rate = ${ORACLE_RATE:-0.8}, draft_len = ${ORACLE_LEN:-4} }"
body='{}'
[ "$compare" = speculation-oracle ] && body='{"temperature": 0}'
server_head() {
  printf '[server]\nlisten = "127.0.0.1:0"\nadmin_listen = "127.0.0.1:0"\nlog_level = "info"\n'
  printf 'plugin_paths = ["%s/bench-plugins/spec_decode/oracle"]\n\n' "$(cd "$build" && pwd)"
  printf '[models.m]\nsource = "gguf"\npath = "%s"\n\n' "$model"
}
if [ "$compare" = speculation-oracle ]; then
  { server_head; engine oracle scheduler.continuous f16 "$oracle"; } > "$out/fill.toml"
fi
{
  server_head
  if [ "$compare" = schedulers ]; then
    engine static scheduler.static f16
    engine continuous scheduler.continuous f16
  elif [ "$compare" = speculation ]; then
    engine plain scheduler.continuous f16
    engine ngram scheduler.continuous f16 'plugin = "spec_decode.ngram"'
  elif [ "$compare" = speculation-oracle ]; then
    engine plain scheduler.continuous f16
    engine oracle scheduler.continuous f16 "$oracle"
  elif [ "$compare" = prefix-cache ]; then
    engine paged scheduler.continuous f16 "" kvcache.paged
    engine prefix scheduler.continuous f16 "" kvcache.prefix
  else
    engine f32 scheduler.continuous f32
    engine f16 scheduler.continuous f16
  fi
  printf '[experiments.sched]\nsticky_key = "none"\nmin_samples = 30\n'
  printf 'arms = [{ name = "a", engine = "%s", percent = 50 }, { name = "b", engine = "%s", percent = 50 }]\n' "$arm_a" "$arm_b"
} > "$out/serve.toml"

pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; true' EXIT
prompts="--prompt-tokens 64 --output-tokens 16:128"
[ "$compare" = prefix-cache ] && prompts="--prompt-tokens 250 --shared-prefix-fraction 0.96 --output-tokens 16"
load() {  # load NAME: the rounds' requests (the same prompts and lengths each time: seed 7)
  # shellcheck disable=SC2086 # $prompts is several options
  "$tokenhost" bench --url "http://127.0.0.1:$gw" -c 16 -n "$requests" $prompts \
    --ignore-eos --extra-body "$body" --seed 7 -q --json "$out/$1-bench.json" > /dev/null
}
if [ "$compare" = speculation-oracle ]; then
  rm -f "$cont"
  start_server "$out/fill.toml" "$out/fill.log"
  load fill
  kill -TERM $pid; wait $pid || true; pid=""
fi
for round in $(seq "$rounds"); do
  start_server "$out/serve.toml" "$out/serve.log"
  load "r$round"
  "$tokenhost" admin --url "$admin" --json ab report sched > "$out/r$round-report.json"
  "$tokenhost" admin --url "$admin" ab report sched > "$out/r$round-report.txt"
  kill -TERM $pid
  wait $pid || true
  pid=""
  python3 - "$out/r$round-report.json" "$round" "$arm_a" "$arm_b" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
arms = {a["name"]: a for a in r["arms"]}
name_a, name_b = sys.argv[3], sys.argv[4]
for c in r["comparisons"]:
    m = c["metric"]
    a, b = arms["a"].get(m), arms["b"].get(m)
    if not a or not b or not a.get("n") or not b.get("n"):
        continue
    print(f"round {sys.argv[2]} {m}: n {a['n']}/{b['n']}, mean {name_a} {a['mean']*1000:.1f} ms, {name_b} {b['mean']*1000:.1f} ms, "
          f"p50 {a['p50']*1000:.1f} / {b['p50']*1000:.1f} ms, diff {c['diff']*1000:.1f} ms "
          f"[{c['ci95'][0]*1000:.1f}, {c['ci95'][1]*1000:.1f}], p {c['p_value']:.2g}: {c['verdict']}")
def load(arm):
    l = arms[arm].get("load") or {}
    if not l.get("steps"):
        return "no steps"
    return f"{l['steps']} steps, {l['tokens_per_step']:.1f} tokens/step, {l['step_s_mean']*1000:.1f} ms/step"
print(f"round {sys.argv[2]} load: {name_a} {load('a')}; {name_b} {load('b')}")
def spec(arm):
    s = arms[arm].get("speculation") or {}
    if not s.get("drafts"):
        return "no drafts"
    return (f"{s['drafts']} drafts, {s['draft_tokens']} draft tokens, {s['accepted_tokens']} accepted "
            f"({100 * s['acceptance']:.0f}%, {s['accepted_per_draft']:.2f} per draft)")
print(f"round {sys.argv[2]} speculation: {name_a} {spec('a')}; {name_b} {spec('b')}")
def prefix(arm):
    p = arms[arm].get("prefix_cache") or {}
    if not p.get("lookups"):
        return "no lookups"
    return f"{p['hits']} of {p['lookups']} prompts found a prefix, {p['cached_tokens']} tokens from the cache"
print(f"round {sys.argv[2]} prefix cache: {name_a} {prefix('a')}; {name_b} {prefix('b')}")
PY
done
