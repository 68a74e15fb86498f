#!/usr/bin/env bash
# Structured output end to end (structured_output/structured_test.mjs): the OpenAI Node SDK and ajv
# (npm, installed into a temporary folder) against two servers of stories260K, one speculating with
# spec_decode.ngram. Each engine gets constraint.gbnf by default (no constraint key in the manifests).
# Skips (77) when the model file or the npm registry is out of reach.
set -euo pipefail
tokenhost=$1
here=$2
source "$here/lib.sh"
require_models "$here"
command -v node >/dev/null || { echo "node is missing: run scripts/setup.sh"; exit 1; }

mkdir -p "$work/sdk"
cp "$here/structured_output/structured_test.mjs" "$work/sdk/"
if ! (cd "$work/sdk" && npm init -y >/dev/null && npm install --no-audit --no-fund --silent openai@4 ajv@8 ajv-formats@3 >"$work/npm.log" 2>&1); then
  cat "$work/npm.log"
  echo "SKIPPED: npm could not install openai, ajv and ajv-formats (no registry access?)"
  exit 77
fi

manifest() {  # manifest NAME [EXTRA ENGINE LINE]
  cat > "$work/$1.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "info"

[models.stories260K]
source = "gguf"
path = "$(cd "$models" && pwd)/stories260K.gguf"

[engines.main]
model = "stories260K"
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged" }
scheduler = { plugin = "scheduler.continuous" }
$2
TOML
}
manifest plain ""
manifest spec 'spec_decode = { plugin = "spec_decode.ngram" }'
pids=()
trap 'for p in "${pids[@]}"; do kill -9 $p 2>/dev/null; done; rm -rf "$work"' EXIT
serve_named plain "$work/plain.toml"
serve_named spec "$work/spec.toml"
grep -q "loaded plugin constraint.gbnf" "$work/plain.log" || { cat "$work/plain.log"; echo "FAIL: constraint.gbnf was not loaded"; exit 1; }
seed=${TOKENHOST_TEST_SEED:-$RANDOM}
echo "seed $seed (TOKENHOST_TEST_SEED replays it)"
node "$work/sdk/structured_test.mjs" "http://127.0.0.1:$gw_plain/v1" "http://127.0.0.1:$gw_spec/v1" "$seed"
# The speculating server verified drafts of the constrained sequences, and kept some.
curl -sf "$admin_spec/metrics" > "$work/metrics.txt"
accepted=$(awk '/^tokenhost_spec_accepted_tokens_total/ {s += $2} END {print s + 0}' "$work/metrics.txt")
drafted=$(awk '/^tokenhost_spec_draft_tokens_total/ {s += $2} END {print s + 0}' "$work/metrics.txt")
python3 -c "import sys; sys.exit(0 if float('$accepted') > 0 else 1)" || { echo "FAIL: no draft token accepted ($drafted drafted)"; exit 1; }
echo "ok: the speculating server accepted $accepted of $drafted draft tokens under constraints"
# The programs were compiled once per schema (each schema asked greedy, sampled and streamed).
compiled=$(grep -c "constraint.gbnf compiled" "$work/plain.log")
[ "$compiled" -le 16 ] || { echo "FAIL: $compiled compilations for at most 16 distinct sources"; exit 1; }
echo "ok: $compiled compilations on the plain server for its distinct sources"
grep -q "constraint allows no token" "$work/plain.log" || { echo "FAIL: the impossible grammar was not logged"; exit 1; }

# Tool calling: copies of stories260K carrying chat templates with tool formats (`quantize --chat-template`).
cp "$here/structured_output/tools_test.mjs" "$work/sdk/"
for t in llama3.1 qwen2.5; do
  "$tokenhost" quantize "$models/stories260K.gguf" "$work/$t.gguf" --type q8_0 --chat-template "$here/../data/chat_templates/$t-tools.jinja" > /dev/null 2>&1
done
cat > "$work/tools.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "info"

[models.llama31]
source = "gguf"
path = "$work/llama3.1.gguf"

[models.qwen]
source = "gguf"
path = "$work/qwen2.5.gguf"

[models.plain]
source = "gguf"
path = "$(cd "$models" && pwd)/stories260K.gguf"

[engines.llama31]
model = "llama31"
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged" }
scheduler = { plugin = "scheduler.continuous" }

[engines.qwen]
model = "qwen"
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged" }
scheduler = { plugin = "scheduler.continuous" }

[engines.plain]
model = "plain"
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged" }
scheduler = { plugin = "scheduler.continuous" }
TOML
serve_named tools "$work/tools.toml"
node "$work/sdk/tools_test.mjs" "http://127.0.0.1:$gw_tools/v1" "$seed"
