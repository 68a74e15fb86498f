#!/usr/bin/env bash
# Speculative decoding against plain decoding with the oracle proposer (bench/spec_decode/oracle: it
# drafts the greedy continuation it saw in a first pass over the same prompts, each draft token
# corrupted at a set rate, so the per-token acceptance is what the setting says) at 1, 4 and 16
# concurrent streams, on make-model's random-weight models. One server per model; each setting swaps
# the oracle in with its config through the admin API, the settings' order reversed every other round,
# median of ROUNDS rounds. Settings:
#   plain              engine main, its spec_decode slot emptied
#   RATE:LENGTH        engine main (draft_policy fixed): every draft of LENGTH tokens verified
#   adaptive@RATE:LENGTH  engine adaptive (the draft controller), the oracle offering LENGTH tokens
#   adaptive@off       engine adaptive, its requests asking for no speculation ("tokenhost":
#                      {"speculate": false}): plain decoding on the same engine and weights
# Per run: output tokens/s over all streams (wall time, greedy: --extra-body '{"temperature": 0}'),
# and the draft tokens verified and accepted (the engine's admin status, before and after). After
# each model, the step cost the engines fitted (a + b * rows, see runtime/draft_controller.hpp).
# Usage: bench/spec_decode/run.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]; environment (defaults):
#   MODELS="110M:q8_0 1.1B:q8_0"  STREAMS="1 4 16"  SETTINGS="1.0:4 0.8:2 0.8:4 0.8:8 0.5:4"
#   ROUNDS=5  PROMPT_TOKENS=64  OUTPUT_TOKENS=64  REQUESTS_PER_STREAM=2
# Prints a markdown table for bench/RESULTS.md; every run's figures are in OUT_DIR/runs.tsv.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-spec-bench}
tokenhost=$build/bin/tokenhost
model_list=${MODELS:-"110M:q8_0 1.1B:q8_0"}
streams_list=${STREAMS:-"1 4 16"}
settings=${SETTINGS:-"1.0:4 0.8:2 0.8:4 0.8:8 0.5:4"}
rounds=${ROUNDS:-5}
prompt_tokens=${PROMPT_TOKENS:-64}
output_tokens=${OUTPUT_TOKENS:-64}
per_stream=${REQUESTS_PER_STREAM:-2}
mkdir -p "$models" "$out"
source "$here/../lib.sh"
export TOKENHOST_ADMIN_TOKEN=spec-decode-bench-token-0123456789
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; true' EXIT

max_streams=0
for s in $streams_list; do [ "$s" -gt "$max_streams" ] && max_streams=$s; done

# engine_of SETTING, rate_len_of SETTING
engine_of() { case "$1" in adaptive@*) echo adaptive ;; *) echo main ;; esac; }
model_of() { case "$1" in adaptive@*) echo bench-adaptive ;; *) echo bench ;; esac; }

# status ENGINE FIELDS: the engine's speculation counters (drafts, verified draft tokens, accepted), or
# with FIELDS=cost its controller's fitted step cost.
status() {
  "$tokenhost" admin --url "$admin" --json status | node -e '
    let t = ""; process.stdin.on("data", (d) => (t += d)).on("end", () => {
      const e = JSON.parse(t).engines.find((x) => x.name === process.argv[1]).speculation;
      if (process.argv[2] === "cost") {
        const c = e.controller;
        const rows = Object.entries(c.step_seconds_by_rows).map(([r, s]) => `${r}: ${(1e3 * s).toFixed(1)}`).join(", ");
        console.log(`${process.argv[1]}: decode step ms by rows (recent mean) ${rows}; line ${(1e3 * c.cost_fixed_s).toFixed(2)} ms + ` +
                    `${(1e3 * c.cost_per_row_s).toFixed(2)} ms x rows`);
      } else console.log(`${e.drafts} ${e.draft_tokens} ${e.accepted_tokens}`);
    });' "$1" "${2:-}"
}

# use_setting SETTING: the oracle with the setting's config in its engine (plain: main's slot emptied).
use_setting() {
  if [ "$1" = plain ]; then
    "$tokenhost" admin --url "$admin" unload main spec_decode > /dev/null 2>&1 || true  # already empty: fine
    return
  fi
  [ "$1" = adaptive@off ] && return  # the requests turn speculation off
  local rl=${1#adaptive@}
  "$tokenhost" admin --url "$admin" swap "$(engine_of "$1")" spec_decode spec_decode.oracle --set accept_rate="${rl%%:*}" \
    --set draft_len="${rl##*:}" --set continuations="$cont" > /dev/null
}

# load STREAMS MODEL NAME [EXTRA_BODY]: every stream sends REQUESTS_PER_STREAM greedy requests; the
# prompts are the same in every run (seed 7), the first STREAMS * REQUESTS_PER_STREAM of the fill pass's.
load() {
  local body=${4:-'{"temperature": 0}'}
  "$tokenhost" bench --url "http://127.0.0.1:$gw" --model "$2" -c "$1" -n "${REQUESTS:-$(( $1 * per_stream ))}" --prompt-tokens "$prompt_tokens" \
    --output-tokens "$output_tokens" --ignore-eos --extra-body "$body" --seed 7 -q --json "$out/$3.json" > "$out/$3.txt"
  node -e 'const r = require(process.argv[1]);
    if (r.requests_failed > 0) { console.error(`${r.requests_failed} requests failed`); process.exit(1); }
    console.log(r.output_throughput.toFixed(2));' "$out/$3.json"
}

machine_line
printf 'model\tstreams\tsetting\tround\ttokens_per_s\tdraft_tokens\taccepted\n' > "$out/runs.tsv"
for m in $model_list; do
  preset=${m%%:*} type=${m##*:}
  file=$(bench_model "$preset" "$type")
  cont="$out/continuations-$preset-$type.bin"
  rm -f "$cont"
  sed -e "s|@MODEL@|$file|" -e "s|@PLUGINS@|$build/bench-plugins/spec_decode/oracle|" -e "s|@CONT@|$cont|" \
    "$here/manifest.toml.in" > "$out/manifest.toml"
  start_server "$out/manifest.toml" "$out/serve-$preset-$type.log"
  # The fill runs at most 8 streams: the oracle keeps a sequence's tokens as of its last propose() call,
  # and a step of many streams grants drafts (and so calls) to few of them.
  fill_streams=$(( max_streams < 8 ? max_streams : 8 ))
  echo "$preset $type: filling the oracle (every prompt once, $fill_streams streams)" >&2
  use_setting 1.0:1
  REQUESTS=$(( max_streams * per_stream )) load "$fill_streams" bench fill > /dev/null
  for round in $(seq "$rounds"); do
    order="plain $settings"
    [ $(( round % 2 )) -eq 0 ] && order=$(tr ' ' '\n' <<<"$order" | tac | xargs)
    for streams in $streams_list; do
      for setting in $order; do
        use_setting "$setting"
        engine=$(engine_of "$setting")
        read -r _ t0 a0 < <(status "$engine")
        body='{"temperature": 0}'
        [ "$setting" = adaptive@off ] && body='{"temperature": 0, "tokenhost": {"speculate": false}}'
        tps=$(load "$streams" "$(model_of "$setting")" "$preset-$type-s$streams-$setting-r$round" "$body")
        read -r _ t1 a1 < <(status "$engine")
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$preset-$type" "$streams" "$setting" "$round" "$tps" $(( t1 - t0 )) $(( a1 - a0 )) >> "$out/runs.tsv"
        echo "round $round $preset-$type streams $streams $setting: $tps tokens/s, accepted $(( a1 - a0 ))/$(( t1 - t0 ))" >&2
      done
    done
  done
  use_setting 1.0:4  # the slot back for its status
  status main cost
  grep -q adaptive@ <<<"$settings" && status adaptive cost
  kill -TERM $pid; wait $pid || true; pid=""
done

# Medians per model, streams and setting; speedup = median tokens/s over plain's median.
node - "$out/runs.tsv" <<'JS'
const rows = require("fs").readFileSync(process.argv[2], "utf8").trim().split("\n").slice(1).map((l) => l.split("\t"));
const median = (v) => { const s = [...v].sort((a, b) => a - b); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const groups = new Map();
for (const [model, streams, setting, , tps, drafted, accepted] of rows) {
  const k = `${model}|${streams}|${setting}`;
  if (!groups.has(k)) groups.set(k, { tps: [], drafted: 0, accepted: 0 });
  const g = groups.get(k);
  g.tps.push(Number(tps)); g.drafted += Number(drafted); g.accepted += Number(accepted);
}
console.log("| model | streams | setting | tokens/s (median) | speedup over plain | draft tokens verified / accepted | accepted per verified | runs |");
console.log("|---|---|---|---|---|---|---|---|");
for (const [k, g] of groups) {
  const [model, streams, setting] = k.split("|");
  const plain = median(groups.get(`${model}|${streams}|plain`).tps);
  const acc = g.drafted > 0 ? `${(100 * g.accepted / g.drafted).toFixed(1)}%` : "-";
  console.log(`| ${model} | ${streams} | ${setting} | ${median(g.tps).toFixed(1)} | ${(median(g.tps) / plain).toFixed(2)}x | ${g.drafted} / ${g.accepted} | ${acc} | ${g.tps.length} |`);
}
JS
