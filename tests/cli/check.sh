#!/usr/bin/env bash
# `tokenhost check`: a good manifest exits 0; a broken one exits 1 and prints file:line:column.
set -euo pipefail
tokenhost=$1 here=$2 fixtures=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

$tokenhost --log-level warn check "$here/../../manifests/default.toml"
$tokenhost --log-level warn check   # the embedded default
# Every manifest of the tree reads, and its plugins accept their engines (the KV dtype A/B included;
# disk-tier.toml's connector makes its folder, here a throwaway one).
export TOKENHOST_KV_DIR="$work/kv"
for m in "$here"/../../manifests/*.toml; do $tokenhost --log-level warn check "$m"; done

expect_error() {  # expect_error FILE PATTERN
  set +e
  out=$($tokenhost --log-level warn check "$1" 2>&1)
  rc=$?
  set -e
  [ $rc -eq 1 ] || { echo "FAIL: check $1 exited $rc"; echo "$out"; exit 1; }
  grep -qE -- "$2" <<<"$out" || { echo "FAIL: check $1 said:"; echo "$out"; echo "expected: $2"; exit 1; }
  echo "ok: $out"
}

sed 's/^log_level = "info"/log_levle = "info"/' "$here/../../manifests/default.toml" > "$work/typo.toml"
expect_error "$work/typo.toml" "^$work/typo.toml:[0-9]+:1: unknown key 'log_levle' in \[server\] \(did you mean 'log_level'\?\)$"

sed 's/block_size = 16/block_size = 0/' "$here/../../manifests/default.toml" > "$work/range.toml"
expect_error "$work/range.toml" "^$work/range.toml:[0-9]+:[0-9]+: 'block_size' in \[engines.main.kvcache\].config is out of range \[1, 1024\]$"

# Every error the reader can find in one run, each located, and their count.
printf '[models.m]\ndim = 32\nn_heads = 4\nsed = 3\n[engines.e]\nmodel = "m"\nmax_step_seqs = 0\nkv_dtype = "f17"\nattention = { plugin = "attention.reference" }\nkvcache = { plugin = "kvcache.paged" }\nscheduler = { plugin = "scheduler.fifo" }\n' > "$work/three.toml"
set +e
out=$($tokenhost --log-level warn check "$work/three.toml" 2>&1)
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "^$work/three.toml:4:1: unknown key 'sed' in \[models.m\]" <<<"$out" &&
  grep -q "^$work/three.toml:7:17: 'max_step_seqs' in \[engines.e\] = 0 is out of range" <<<"$out" &&
  grep -q "^$work/three.toml:8:12: kv_dtype 'f17'" <<<"$out" && grep -q "^3 errors$" <<<"$out" ||
  { echo "FAIL: check did not list the three errors (rc $rc):"; echo "$out"; exit 1; }
echo "ok: check lists every error"

# A KV pool larger than this machine's memory is refused by check, not first by serve's allocation.
sed -E 's/n_blocks = [0-9]+/n_blocks = 2147483647/' "$here/../../manifests/default.toml" > "$work/pool.toml"
expect_error "$work/pool.toml" "the K and V pools need [0-9]+ bytes \\([0-9]+ MiB\\), more than the [0-9]+ bytes of memory of device cpu"

# A short admin token is refused whatever its source.
set +e
out=$(TOKENHOST_ADMIN_TOKEN=short $tokenhost --log-level warn check "$here/../../manifests/default.toml" 2>&1)
rc=$?
set -e
[ $rc -eq 1 ] && grep -q 'TOKENHOST_ADMIN_TOKEN must be at least 16 characters (it has 5)' <<<"$out" || { echo "FAIL: short token: $rc $out"; exit 1; }

printf '[server\n' > "$work/syntax.toml"
expect_error "$work/syntax.toml" "^$work/syntax.toml:1:[0-9]+: TOML syntax error"

expect_error "$work/missing.toml" "^$work/missing.toml:1:1: cannot open the file$"
expect_error /dev/zero "^/dev/zero:1:1: is not a regular file$"
# A plugin whose create() fails with the manifest's config: check fails as serve would, naming it.
{
  echo '[server]'
  echo "plugin_paths = [\"$fixtures/create_fails\"]"
  sed -n '/^\[models/,$p' "$here/../../manifests/default.toml" | sed 's/plugin = "scheduler\.[a-z_]*"/plugin = "scheduler.create_fails"/'
} > "$work/create.toml"
grep -q 'scheduler.create_fails' "$work/create.toml" || { echo "FAIL: the default manifest has no scheduler line to replace"; exit 1; }
expect_error "$work/create.toml" "creating the engines as serve would: .*scheduler.create_fails.*fixture refuses to start: the answer must be 42"
echo "check reports file:line:column"
