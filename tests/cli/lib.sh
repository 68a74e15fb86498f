# Shared by the cli tests (sourced): start_server runs `tokenhost serve` on the default manifest with
# ports chosen by the system and sets pid, gw (gateway port), admin (admin API base URL) and work (a
# temporary folder removed at exit, with the process killed if still running); require_models sets
# models (the folder of stories260K: $TOKENHOST_MODELS, else the tree's models/) or skips the test (77)
# when the model is not there; serve_named and complete_text run a named server of several and ask it.
work=$(mktemp -d)
# The admin API's token: curl "${auth[@]}" "$admin/admin/..." sends it.
export TOKENHOST_ADMIN_TOKEN=cli-test-admin-token-0123456789
auth=(-H "Authorization: Bearer $TOKENHOST_ADMIN_TOKEN")
pid=""
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$work"' EXIT

start_server() {  # start_server TOKENHOST MANIFEST
  sed -e 's/^listen = .*/listen = "127.0.0.1:0"/' -e 's/^admin_listen = .*/admin_listen = "127.0.0.1:0"/' "$2" > "$work/serve.toml"
  rm -f "$work/log"  # a second server in one test must not be taken as started on the first one's log
  "$1" serve "$work/serve.toml" > "$work/log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "gateway listening" "$work/log" && break; sleep 0.1; done
  local line
  line=$(grep "gateway listening" "$work/log") || { cat "$work/log"; exit 1; }
  gw=$(sed -E 's/.*listening on [0-9.]+:([0-9]+),.*/\1/' <<<"$line")
  admin="http://127.0.0.1:$(sed -E 's/.*admin API on [0-9.]+:([0-9]+).*/\1/' <<<"$line")"
}

admin_ok() {  # admin_ok PATTERN ARGS...: `tokenhost admin ARGS` ($tokenhost, against $admin) exits 0 and prints PATTERN
  local pattern=$1; shift
  if ! "$tokenhost" admin --url "$admin" "$@" > "$work/out" 2>&1 || ! grep -qE -- "$pattern" "$work/out"; then
    echo "FAIL: admin $* (expected /$pattern/):"; cat "$work/out"; exit 1
  fi
  echo "ok: admin $*"
}

expect_fail() {  # expect_fail COMMAND TEXT ARGS...: `tokenhost COMMAND ARGS` ($tokenhost) exits non-zero, saying TEXT on stderr
  local command=$1 text=$2
  shift 2
  if "$tokenhost" "$command" "$@" > "$work/out.txt" 2> "$work/err.txt"; then echo "FAIL: $command $* succeeded"; exit 1; fi
  grep -qF -- "$text" "$work/err.txt" || { cat "$work/err.txt"; echo "FAIL: $command $* did not say '$text'"; exit 1; }
  echo "ok: $command $* -> $text"
}

require_models() {  # require_models TESTS_CLI_DIR
  models=${TOKENHOST_MODELS:-$1/../../models}
  if [ ! -f "$models/stories260K.gguf" ]; then echo "SKIPPED: $models/stories260K.gguf not found"; exit 77; fi
}

serve_named() {  # serve_named NAME MANIFEST: `$tokenhost serve MANIFEST` logging to $work/NAME.log; waits until it listens, adds its pid to pids, sets gw_NAME and admin_NAME
  "$tokenhost" serve "$2" > "$work/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "gateway listening" "$work/$1.log" && break; sleep 0.1; done
  local line
  line=$(grep "gateway listening" "$work/$1.log") || { cat "$work/$1.log"; exit 1; }
  eval "gw_$1=$(sed -E 's/.*listening on [0-9.]+:([0-9]+),.*/\1/' <<<"$line")"
  eval "admin_$1=http://127.0.0.1:$(sed -E 's/.*admin API on [0-9.]+:([0-9]+).*/\1/' <<<"$line")"
}

complete_text() {  # complete_text PORT PROMPT [MAX_TOKENS]: the greedy completion's text (12 tokens by default)
  curl -s "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$2\", \"max_tokens\": ${3:-12}, \"temperature\": 0}" > "$work/answer.json"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$work/answer.json" 2>/dev/null ||
    { echo "FAIL: no completion from port $1: $(cat "$work/answer.json")" >&2; return 1; }
}

stories_manifest_head() {  # stories_manifest_head: a manifest's [server] (ports the system picks, info log) and stories260K as model "stories"
  cat <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "info"

[models.stories]
source = "builtin"
name = "stories260K"
TOML
}
