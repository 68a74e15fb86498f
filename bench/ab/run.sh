#!/usr/bin/env bash
# An A/B experiment on generated load: scheduler.static (arm a, the baseline) against
# scheduler.continuous (arm b) as two engines of one server sharing one model, each request to a
# random arm (sticky_key = "none"), 16 concurrent streams from `tokenhost bench`; then the
# experiment's report (`tokenhost admin --json ab report`). Each round starts a fresh server.
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

engine() {  # engine NAME SCHEDULER
  printf '[engines.%s]\nmodel = "m"\nmax_step_tokens = 512\nmax_step_seqs = 64\n' "$1"
  printf 'attention = { plugin = "attention.cpu_flash" }\n'
  printf 'kvcache = { plugin = "kvcache.paged", config = { block_size = 16, n_blocks = 1600 } }\n'
  printf 'scheduler = { plugin = "%s" }\n\n' "$2"
}
{
  printf '[server]\nlisten = "127.0.0.1:0"\nadmin_listen = "127.0.0.1:0"\nlog_level = "info"\n\n'
  printf '[models.m]\nsource = "gguf"\npath = "%s"\n\n' "$model"
  engine static scheduler.static
  engine continuous scheduler.continuous
  printf '[experiments.sched]\nsticky_key = "none"\nmin_samples = 30\n'
  printf 'arms = [{ name = "a", engine = "static", percent = 50 }, { name = "b", engine = "continuous", percent = 50 }]\n'
} > "$out/serve.toml"

pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; true' EXIT
for round in $(seq "$rounds"); do
  start_server "$out/serve.toml" "$out/serve.log"
  "$tokenhost" bench --url "http://127.0.0.1:$gw" -c 16 -n "$requests" --prompt-tokens 64 --output-tokens 16:128 \
    --ignore-eos --seed 7 -q --json "$out/r$round-bench.json" > /dev/null
  "$tokenhost" admin --url "$admin" --json ab report sched > "$out/r$round-report.json"
  "$tokenhost" admin --url "$admin" ab report sched > "$out/r$round-report.txt"
  kill -TERM $pid
  wait $pid || true
  pid=""
  python3 - "$out/r$round-report.json" "$round" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
arms = {a["name"]: a for a in r["arms"]}
ttft = next(c for c in r["comparisons"] if c["metric"] == "ttft_s")
a, b = arms["a"]["ttft_s"], arms["b"]["ttft_s"]
print(f"round {sys.argv[2]}: n {a['n']}/{b['n']}, TTFT mean static {a['mean']*1000:.0f} ms, continuous {b['mean']*1000:.0f} ms, "
      f"p50 {a['p50']*1000:.0f} / {b['p50']*1000:.0f} ms (p50 ratio {a['p50']/b['p50']:.1f}x), "
      f"diff {ttft['diff']*1000:.0f} ms [{ttft['ci95'][0]*1000:.0f}, {ttft['ci95'][1]*1000:.0f}], p {ttft['p_value']:.2g}: {ttft['verdict']}")
PY
done
