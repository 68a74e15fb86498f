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
if $tokenhost frobnicate >/dev/null 2>&1; then echo "FAIL: an unknown command exited 0"; exit 1; fi
echo "all --help pages present"
