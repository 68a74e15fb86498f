# Shared by the benchmark scripts (sourced; they set `tokenhost`, `models` and `out` first).
#   bench_model PRESET TYPE   prints the path of that make-model file, writing it once (seed 1)
#   machine_line              the cores, CPU and date, for the results
#   start_server MANIFEST LOG runs `tokenhost serve`, waits until it listens, sets pid, gw (gateway
#                             port) and admin (admin API base URL)
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
