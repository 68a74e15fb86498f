# Shared by the benchmark scripts (sourced; they set `tokenhost`, `models` and `out` first).
#   bench_model PRESET TYPE   prints the path of that make-model file, writing it once (seed 1)
#   machine_line              the cores, CPU and date, for the results
#   start_server MANIFEST LOG runs `tokenhost serve`, waits until it listens, sets pid, gw (gateway
#                             port) and admin (admin API base URL)
#   start_llama_server GGUF PARALLEL CONTEXT LOG [ARG...]
#                             runs $LLAMA_SERVER (a llama-server built elsewhere) on 2 threads with
#                             PARALLEL slots sharing CONTEXT tokens (and ARGs), waits until it answers
#                             /health, sets llama_pid and llama_url
#   stop_llama_server         stops the llama-server of llama_pid, if any, and clears it. A server
#                             started in a subshell (a function read through "< <(...)") must be
#                             stopped there: the caller never sees its llama_pid
bench_model() {
  local file="$models/$1-$2.gguf"
  [ -f "$file" ] || "$tokenhost" make-model "$file" --preset "$1" --type "$2" --seed 1 >&2
  echo "$file"
}

machine_line() {
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%F)"
}

start_server() {
  "$tokenhost" serve "$1" > "$2" 2>&1 &
  pid=$!
  for _ in $(seq 300); do grep -q "gateway listening" "$2" && break; sleep 0.1; done
  local line
  line=$(grep "gateway listening" "$2") || { echo "the server did not start:"; cat "$2"; exit 1; }
  gw=$(sed -E 's/.*listening on [0-9.]+:([0-9]+),.*/\1/' <<<"$line")
  admin="http://127.0.0.1:$(sed -E 's/.*admin API on [0-9.]+:([0-9]+).*/\1/' <<<"$line")"
}

start_llama_server() {
  local port=$(( 20000 + RANDOM % 20000 )) file=$1 parallel=$2 context=$3 log=$4
  shift 4
  "$LLAMA_SERVER" -m "$file" --host 127.0.0.1 --port $port -t 2 --parallel "$parallel" -c "$context" --no-webui "$@" > "$log" 2>&1 &
  llama_pid=$!
  llama_url="http://127.0.0.1:$port"
  for _ in $(seq 600); do curl -sf "$llama_url/health" > /dev/null 2>&1 && return; sleep 0.1; done
  echo "llama-server did not start:"; tail -20 "$log"; exit 1
}

stop_llama_server() {
  if [ -n "${llama_pid:-}" ]; then kill "$llama_pid" 2>/dev/null || true; wait "$llama_pid" 2>/dev/null || true; fi
  llama_pid=""
}
