#!/usr/bin/env bash
# Real proposers against plain decoding: prompt lookup (spec_decode.ngram), suffix decoding
# (spec_decode.suffix), a draft model (spec_decode.draft with the target's Q8_0 and Q4_0 copies, written
# by `tokenhost quantize`) and self-speculation (spec_decode.early_exit), on two workloads of greedy
# requests: free generation (story openings) and prompt copying (each opening, its greedy continuation,
# then the opening again: the continuation is in the prompt). One server per target; each setting swaps
# its proposer into the spec_decode slot (plain: the slot emptied), the settings' order reversed every
# other round, median of ROUNDS rounds. Per run: completion tokens/s over the wall time, and the draft
# tokens verified and accepted (the engine's admin status, before and after).
# Usage: bench/spec_decode/proposers.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]; environment (defaults):
#   TARGETS="stories260K"  (stories260K: the repository's model; PRESET:TYPE: a make-model file, e.g. 1.1B:f16)
#   SETTINGS="plain ngram suffix draft:q8_0 draft:q4_0 early_exit:3"  STREAMS="1"
#   ROUNDS=5  OUTPUT_TOKENS=96  MAX_DRAFT=4  PROMPTS=8 (the first PROMPTS openings of the list below)
#   POLICY=fixed (every draft verified) or adaptive (the engine's draft controller)
# Prints a markdown table for bench/RESULTS.md; every run's figures are in OUT_DIR/runs.tsv.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-proposers-bench}
tokenhost=$build/bin/tokenhost
targets=${TARGETS:-stories260K}
settings=${SETTINGS:-"plain ngram suffix draft:q8_0 draft:q4_0 early_exit:3"}
streams_list=${STREAMS:-1}
rounds=${ROUNDS:-5}
output_tokens=${OUTPUT_TOKENS:-96}
max_draft=${MAX_DRAFT:-4}
n_prompts=${PROMPTS:-8}
policy=${POLICY:-fixed}
mkdir -p "$models" "$out"
source "$here/../lib.sh"
export TOKENHOST_ADMIN_TOKEN=spec-decode-bench-token-0123456789
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; true' EXIT

# The free-generation prompts: story openings.
node -e 'require("fs").writeFileSync(process.argv[1], JSON.stringify([
  "Once upon a time, there was a little girl named Lily.", "One day, a big dog went to the park.",
  "Tom had a red ball. He liked to", "The sun was hot and the bird was sad.", "Sam and his mom went to the store to buy",
  "There was a small cat who lived in a big house.", "Anna wanted to play with her new toy, but",
  "The little boy looked at the sky and said"].slice(0, Number(process.argv[2]))))' "$out/free.json" "$n_prompts"

status() {
  "$tokenhost" admin --url "$admin" --json status | node -e '
    let t = ""; process.stdin.on("data", (d) => (t += d)).on("end", () => {
      const e = JSON.parse(t).engines.find((x) => x.name === "main").speculation;
      console.log(`${e.draft_tokens} ${e.accepted_tokens}`);
    });'
}

# use_setting SETTING: plain | ngram | suffix | draft:q8_0 | draft:q4_0 | draft:self | early_exit:LAYERS
use_setting() {
  case "$1" in
    plain) "$tokenhost" admin --url "$admin" unload main spec_decode > /dev/null 2>&1 || true ;;
    draft:self) "$tokenhost" admin --url "$admin" swap main spec_decode spec_decode.draft --set model= > /dev/null ;;
    draft:*) "$tokenhost" admin --url "$admin" swap main spec_decode spec_decode.draft --set model="draft-${1#draft:}" > /dev/null ;;
    early_exit:*) "$tokenhost" admin --url "$admin" swap main spec_decode spec_decode.early_exit --set layers="${1#early_exit:}" > /dev/null ;;
    *) "$tokenhost" admin --url "$admin" swap main spec_decode "spec_decode.$1" > /dev/null ;;
  esac
}

machine_line
printf 'target\tworkload\tstreams\tsetting\tround\ttokens_per_s\tdraft_tokens\taccepted\n' > "$out/runs.tsv"
for t in $targets; do
  if [ "$t" = stories260K ]; then
    target=$(cd "$here/../.." && pwd)/models/stories260K.gguf context=512
  else
    target=$(bench_model "${t%%:*}" "${t##*:}") context=1024
  fi
  for q in q8_0 q4_0; do
    [ -f "$out/$t-$q.gguf" ] || "$tokenhost" quantize "$target" "$out/$t-$q.gguf" --type "$q" > "$out/quantize-$t-$q.txt"
  done
  sed -e "s|@TARGET@|$target|" -e "s|@DRAFT_Q8@|$out/$t-q8_0.gguf|" -e "s|@DRAFT_Q4@|$out/$t-q4_0.gguf|" \
    -e "s|@CONTEXT@|$context|" -e "s|@MAX_DRAFT@|$max_draft|" -e "s|@POLICY@|$policy|" "$here/proposers.toml.in" > "$out/manifest.toml"
  start_server "$out/manifest.toml" "$out/serve-$t.log"
  use_setting plain
  node "$here/greedy_client.js" "http://127.0.0.1:$gw" target "$out/free.json" 1 "$output_tokens" --copy "$out/copy.json"
  for round in $(seq "$rounds"); do
    order="$settings"
    [ $(( round % 2 )) -eq 0 ] && order=$(tr ' ' '\n' <<<"$order" | tac | xargs)
    for workload in free copy; do
      for streams in $streams_list; do
        for setting in $order; do
          use_setting "$setting"
          read -r t0 a0 < <(status)
          tps=$(node "$here/greedy_client.js" "http://127.0.0.1:$gw" target "$out/$workload.json" "$streams" "$output_tokens")
          read -r t1 a1 < <(status)
          [ "$setting" = plain ] && t1=$t0 a1=$a0  # the slot is empty: counters of earlier settings
          printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$workload" "$streams" "$setting" "$round" "$tps" $(( t1 - t0 )) $(( a1 - a0 )) >> "$out/runs.tsv"
          echo "round $round $t $workload streams $streams $setting: $tps tokens/s, accepted $(( a1 - a0 ))/$(( t1 - t0 ))" >&2
        done
      done
    done
  done
  kill -TERM $pid; wait $pid || true; pid=""
done

# Medians per target, workload, streams and setting; speedup = median tokens/s over plain's median.
node - "$out/runs.tsv" <<'JS'
const rows = require("fs").readFileSync(process.argv[2], "utf8").trim().split("\n").slice(1).map((l) => l.split("\t"));
const median = (v) => { const s = [...v].sort((a, b) => a - b); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const groups = new Map();
for (const [target, workload, streams, setting, , tps, drafted, accepted] of rows) {
  const k = `${target}|${workload}|${streams}|${setting}`;
  if (!groups.has(k)) groups.set(k, { tps: [], drafted: 0, accepted: 0 });
  const g = groups.get(k);
  g.tps.push(Number(tps)); g.drafted += Number(drafted); g.accepted += Number(accepted);
}
console.log("| target | workload | streams | proposer | tokens/s (median) | vs plain | draft tokens accepted |");
console.log("| --- | --- | --- | --- | --- | --- | --- |");
for (const [k, g] of groups) {
  const [target, workload, streams, setting] = k.split("|");
  const plain = median(groups.get(`${target}|${workload}|${streams}|plain`).tps);
  const m = median(g.tps);
  const acc = g.drafted ? `${(100 * g.accepted / g.drafted).toFixed(0)}% of ${g.drafted}` : "-";
  console.log(`| ${target} | ${workload} | ${streams} | ${setting} | ${m.toFixed(1)} | ${(m / plain).toFixed(2)}x | ${acc} |`);
}
JS
