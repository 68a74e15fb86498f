#!/usr/bin/env bash
# The official OpenAI Node SDK (npm package `openai`, installed into a temporary folder) talks to
# `tokenhost serve` on stories260K: openai_node/sdk_test.mjs. Skips (77) when the model file or the
# npm registry is out of reach.
set -euo pipefail
tokenhost=$1
here=$2
source "$here/lib.sh"
require_models "$here"
command -v node >/dev/null || { echo "node is missing: run scripts/setup.sh"; exit 1; }

mkdir -p "$work/sdk"
cp "$here/openai_node/sdk_test.mjs" "$work/sdk/"
if ! (cd "$work/sdk" && npm init -y >/dev/null && npm install --no-audit --no-fund --silent openai@4 >"$work/npm.log" 2>&1); then
  cat "$work/npm.log"
  echo "SKIPPED: npm could not install the openai package (no registry access?)"
  exit 77
fi

cat > "$work/stories.toml" <<TOML
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
TOML
start_server "$tokenhost" "$work/stories.toml"
node "$work/sdk/sdk_test.mjs" "http://127.0.0.1:$gw/v1"
kill -TERM $pid
wait $pid
pid=""
