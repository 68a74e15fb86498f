#!/usr/bin/env bash
# Every command explains itself with --help and exits 0.
set -euo pipefail
tokenhost=$1
check() {  # check "ARGS" "TEXT": `tokenhost ARGS --help` exits 0 and says TEXT
  local out
  out=$($tokenhost $1 --help)
  grep -qF -- "$2" <<<"$out" || { echo "FAIL: '$1 --help' does not say '$2':"; echo "$out"; exit 1; }
  echo "ok: $1 --help"
}
check "" "serve"
check "serve" "embedded manifests/default.toml"
check "check" "file:line:column"
check "plugins" "list"
check "plugins list" "One line per plugin"
check "plugins inspect" "whether its library loads"
check "bench" "OpenAI-compatible"
check "make-model" "--shared-gate"
check "generate" "--kv-dtype"
check "tokenize" "--pieces"
check "quantize" "multiple of the type's"
check "serve" "--admin-port"
check "key-id" "payer id"
# key-id: the same id for a key given as an argument or on stdin, another for another key.
a=$($tokenhost key-id secret-key-one) b=$(echo secret-key-one | $tokenhost key-id) c=$($tokenhost key-id secret-key-two)
[[ "$a" =~ ^key-[0-9a-f]{16}$ && "$a" == "$b" && "$a" != "$c" ]] || { echo "FAIL: key-id gave '$a', '$b', '$c'"; exit 1; }
echo "ok: key-id"
if $tokenhost frobnicate >/dev/null 2>&1; then echo "FAIL: an unknown command exited 0"; exit 1; fi
version=$($tokenhost --version)
grep -qE '^tokenhost [0-9]+\.[0-9]+\.[0-9]+ \(plugin ABI [0-9]+\.[0-9]+\)$' <<<"$version" || { echo "FAIL: --version said '$version'"; exit 1; }
echo "ok: $version"

# --port and --admin-port replace the embedded default's 8080 and 8081 (0: any free port).
work=$(mktemp -d)
TOKENHOST_CACHE="$work" $tokenhost serve --host 127.0.0.1 --port 0 --admin-port 0 > "$work/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do grep -q "gateway listening" "$work/log" && break; sleep 0.1; done
line=$(grep "gateway listening" "$work/log") || { cat "$work/log"; exit 1; }
grep -qE 'listening on 127\.0\.0\.1:[0-9]+, admin API on 127\.0\.0\.1:[0-9]+' <<<"$line" && ! grep -qE ':(8080|8081)\b' <<<"$line" ||
  { echo "FAIL: the ports were not replaced: $line"; exit 1; }
gw=$(sed -E 's/.*listening on [0-9.]+:([0-9]+),.*/\1/' <<<"$line")
curl -sf "http://127.0.0.1:$gw/v1/models" > "$work/models.json"
grep -q '"stories"' "$work/models.json" && grep -q '"context_length": *512' "$work/models.json" && grep -q '"max_model_len": *512' "$work/models.json" ||
  { cat "$work/models.json"; echo "FAIL: /v1/models without the model's context"; exit 1; }
kill -TERM $pid; wait $pid
echo "ok: serve --host --port --admin-port"
echo "all --help pages present"
