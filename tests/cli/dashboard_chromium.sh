#!/usr/bin/env bash
# The dashboard at /dashboard in headless Chromium, driven through chromedriver (W3C WebDriver, from
# Node's built-in fetch: dashboard_chromium/dashboard_test.mjs) against `tokenhost serve` with two
# engines on stories260K and an A/B experiment between them, and a q8_0 MoE engine (its heat map): what the page shows is compared with the
# admin API. Saves a screenshot (dashboard.png in the working folder, the build tree under CTest).
# Skips (77) without chromium, chromedriver or the model file.
set -euo pipefail
tokenhost=$1 here=$2 fixtures=$3
source "$here/lib.sh"
require_models "$here"
chromium=$(command -v chromium || command -v chromium-browser || true)
chromedriver=$(command -v chromedriver || true)
if [ -z "$chromium" ] || [ -z "$chromedriver" ]; then
  echo "SKIPPED: needs chromium and chromedriver (Debian packages chromium, chromium-driver: scripts/setup.sh installs them)"
  exit 77
fi
command -v node >/dev/null || { echo "node is missing: run scripts/setup.sh"; exit 1; }

# A small q8_0 MoE model on an engine of its own, for the page's expert-load heat map.
"$tokenhost" make-model "$work/moe.gguf" --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 32 --vocab 300 \
  --experts 4 --experts-used 2 --seed 1 --type q8_0 > /dev/null 2>&1
cat > "$work/two_engines.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "info"
plugins_from_anywhere = true  # the test registers fixtures from the build folder
restart_delay_ms = 60000  # an engine stopped by a plugin fault stays down until the test repairs it

[models.stories260K]
source = "gguf"
path = "$(cd "$models" && pwd)/stories260K.gguf"

[engines.fast]
model = "stories260K"
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged" }
scheduler = { plugin = "scheduler.continuous" }
spec_decode = { plugin = "spec_decode.ngram" }

[engines.ref]
model = "stories260K"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.prefix" }
scheduler = { plugin = "scheduler.fifo" }

[models.moe]
source = "gguf"
path = "$work/moe.gguf"

[engines.moe]
model = "moe"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged" }
scheduler = { plugin = "scheduler.fifo" }
moe = { plugin = "moe.topk" }
TOML
start_server "$tokenhost" "$work/two_engines.toml"
curl -sf "http://127.0.0.1:$gw/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "moe", "prompt": "hello", "max_tokens": 8, "temperature": 0}' > /dev/null ||
  { echo "FAIL: no completion from the MoE engine"; exit 1; }

# The page needs no token, and is the source file byte for byte.
curl -s -D "$work/headers" -o "$work/page.html" "$admin/dashboard"
grep -qi '^content-type: text/html' "$work/headers" && grep -qi "^content-security-policy: default-src 'none'" "$work/headers" ||
  { echo "FAIL: GET /dashboard headers:"; cat "$work/headers"; exit 1; }
cmp "$work/page.html" "$here/../../host/http/dashboard/index.html" || { echo "FAIL: GET /dashboard is not host/http/dashboard/index.html"; exit 1; }
echo "ok: GET /dashboard serves host/http/dashboard/index.html without a token"

status=0
ADMIN_URL=$admin GATEWAY_URL="http://127.0.0.1:$gw" ADMIN_TOKEN=$TOKENHOST_ADMIN_TOKEN TOKENHOST=$tokenhost \
  FIXTURES=$fixtures CHROMIUM=$chromium CHROMEDRIVER=$chromedriver SCREENSHOT="$PWD/dashboard.png" SERVER_PID=$pid \
  PROFILE_DIR="$work/chromium-profile" node "$here/dashboard_chromium/dashboard_test.mjs" || status=$?
# The test stops the server itself (to see the page report it gone); it must have exited cleanly.
if [ $status -eq 0 ]; then
  wait $pid || { echo "FAIL: tokenhost serve exited $? after SIGTERM"; tail -20 "$work/log"; exit 1; }
  pid=""
else
  tail -30 "$work/log"
fi
exit $status
