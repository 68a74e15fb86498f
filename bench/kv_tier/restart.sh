#!/usr/bin/env bash
# A known long prompt after a restart (issue 32): kv_connector.disk against recomputing and against
# llama-server's slot save/restore, on the same GGUF file (make-model 110M Q8_0 with a 4,096-token
# context). One prompt of PROMPT_TOKENS token ids (the same ids to both servers), one token out; the
# time from sending the request to its answer, by one client (curl), is the time to the first token.
# Settings:
#   computed         tokenhost started on an empty KV folder: the prompt computed
#   disk             tokenhost restarted on the folder the computed ask filled: the prompt's blocks
#                    loaded from disk (the memory cache is empty after a restart)
#   llama-computed   llama-server started fresh (slot 0 empty, "cache_prompt": true)
#   llama-restored   llama-server restarted, slot 0 restored from the file an earlier llama-server saved
#                    after the same prompt (POST /slots/0?action=restore, timed apart), then the prompt
# Every server runs with 2 threads. Each round runs the settings in turn, reversed every other round;
# the table shows medians of ROUNDS rounds. LLAMA_SERVER is the path of a llama-server binary built
# elsewhere (this repository neither fetches nor builds it); without it only tokenhost's settings run.
# Usage: bench/kv_tier/restart.sh [BUILD_DIR] [MODEL_DIR] [OUT_DIR]; environment (defaults):
#   PROMPT_TOKENS=2000  ROUNDS=5  LLAMA_SERVER=(unset)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
models=${2:-/tmp/tokenhost-bench-models}
out=${3:-/tmp/tokenhost-restart-bench}
tokenhost=$build/bin/tokenhost
prompt_tokens=${PROMPT_TOKENS:-2000}
rounds=${ROUNDS:-5}
mkdir -p "$models" "$out"
source "$here/../lib.sh"
pid="" llama_pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; [ -n "$llama_pid" ] && kill $llama_pid 2>/dev/null; true' EXIT

file="$models/110M-q8_0-ctx4096.gguf"
[ -f "$file" ] || "$tokenhost" make-model "$file" --preset 110M --type q8_0 --context 4096 --seed 1 >&2
python3 -c 'import json,random,sys; r=random.Random(7); print(json.dumps([r.randrange(1000, 30000) for _ in range(int(sys.argv[1]))]))' \
  "$prompt_tokens" > "$out/prompt.json"

cat > "$out/manifest.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "info"

[models.m]
source = "gguf"
path = "$file"

[engines.main]
model = "m"
max_step_tokens = 512
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.prefix", config = { block_size = 16, n_blocks = 1024 } }
scheduler = { plugin = "scheduler.continuous" }

[[engines.main.kv_connector]]
plugin = "kv_connector.disk"
config = { folder = "$out/kv" }
TOML

stop() {  # stop PID
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
ask_tokenhost() {  # ask_tokenhost: seconds to the answer of one token
  rm -f "$out/answer.json"
  curl -s -o "$out/answer.json" -w '%{time_total}' "http://127.0.0.1:$gw/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": $(cat "$out/prompt.json"), \"max_tokens\": 1, \"temperature\": 0}"
  grep -q '"choices"' "$out/answer.json" || { echo "tokenhost failed: $(cat "$out/answer.json")" >&2; exit 1; }
}
llama_start() {  # llama_start NAME: a fresh llama-server on the file, slots saved to $out/slots, logging to llama-NAME.log
  start_llama_server "$file" 1 4096 "$out/llama-$1.log" --slot-save-path "$out/slots"
}
ask_llama() {  # ask_llama: seconds to the answer of one token
  rm -f "$out/answer.json"
  curl -s -o "$out/answer.json" -w '%{time_total}' "$llama_url/completion" -H 'Content-Type: application/json' \
    -d "{\"prompt\": $(cat "$out/prompt.json"), \"n_predict\": 1, \"temperature\": 0, \"cache_prompt\": true, \"id_slot\": 0}"
  grep -q '"content"' "$out/answer.json" || { echo "llama-server failed: $(cat "$out/answer.json")" >&2; exit 1; }
}

# run SETTING ROUND: prints "ms [restore_ms]" for one ask of that setting (each server logs to a file of
# its own: a stopped server's last lines never land in the next one's log).
run() {
  case "$1" in
    computed)
      rm -rf "$out/kv"
      start_server "$out/manifest.toml" "$out/serve-$1-$2.log"
      python3 -c 'print(round(float(__import__("sys").argv[1]) * 1000, 1))' "$(ask_tokenhost)"
      stop "$pid"; pid="" ;;
    disk)  # the folder the computed ask of this round filled
      start_server "$out/manifest.toml" "$out/serve-$1-$2.log"
      python3 -c 'print(round(float(__import__("sys").argv[1]) * 1000, 1))' "$(ask_tokenhost)"
      "$tokenhost" admin --url "$admin" --json status > "$out/status.json"
      python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["engines"][0]["kv_connectors"]["layers"][0]; sys.exit(0 if l["hits"]==1 else 1)' "$out/status.json" ||
        { echo "the restarted server did not load the prompt from disk" >&2; exit 1; }
      stop "$pid"; pid="" ;;
    llama-computed)
      rm -rf "$out/slots"; mkdir -p "$out/slots"
      llama_start "$1-$2"
      python3 -c 'print(round(float(__import__("sys").argv[1]) * 1000, 1))' "$(ask_llama)"
      curl -sf -X POST "$llama_url/slots/0?action=save" -H 'Content-Type: application/json' -d '{"filename": "prompt.bin"}' > /dev/null
      stop "$llama_pid"; llama_pid="" ;;
    llama-restored)  # the slot file the llama-computed ask of this round saved
      llama_start "$1-$2"
      local t0 t1
      t0=$(date +%s.%N)
      curl -sf -X POST "$llama_url/slots/0?action=restore" -H 'Content-Type: application/json' -d '{"filename": "prompt.bin"}' > "$out/restore.json" ||
        { echo "llama-server did not restore the slot" >&2; exit 1; }
      t1=$(date +%s.%N)
      python3 -c 'import sys; print(round(float(sys.argv[1]) * 1000, 1), round((float(sys.argv[3]) - float(sys.argv[2])) * 1000, 1))' "$(ask_llama)" "$t0" "$t1"
      stop "$llama_pid"; llama_pid="" ;;
  esac
}

settings="computed disk"
[ -n "${LLAMA_SERVER:-}" ] && settings="$settings llama-computed llama-restored"
machine_line
printf 'setting\tround\tms\trestore_ms\n' > "$out/runs.tsv"
for round in $(seq "$rounds"); do
  # computed before disk and llama-computed before llama-restored (each fills what the other reads);
  # the pairs swap places every other round.
  order=$settings
  [ $(( round % 2 )) -eq 0 ] && [ -n "${LLAMA_SERVER:-}" ] && order="llama-computed llama-restored computed disk"
  for setting in $order; do
    read -r ms restore < <(run "$setting" "$round")
    printf '%s\t%s\t%s\t%s\n' "$setting" "$round" "$ms" "${restore:--}" >> "$out/runs.tsv"
    echo "round $round $setting: $ms ms${restore:+ (restore $restore ms)}" >&2
  done
done

python3 - "$out/runs.tsv" "$prompt_tokens" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]).readlines()[1:]]
by = {}
for setting, _, ms, restore in rows:
    by.setdefault(setting, []).append((float(ms), None if restore == "-" else float(restore)))
print(f"| setting ({sys.argv[2]}-token prompt, 1 token out) | time to the token, ms (median) | restore call, ms | runs |")
print("|---|---|---|---|")
for s, v in by.items():
    restores = [r for _, r in v if r is not None]
    print(f"| {s} | {statistics.median(m for m, _ in v):.1f} | {statistics.median(restores):.1f} |" if restores else
          f"| {s} | {statistics.median(m for m, _ in v):.1f} | - |", len(v), "|")
PY
