#!/usr/bin/env bash
# `tokenhost plugins`: inspect shows each config key's type, default and range, in text and JSON; a
# plugin whose manifest was skipped is named with the reason, not only "no plugin"; the admin API's
# plugin list carries the same defaults and ranges.
set -euo pipefail
tokenhost=$1 here=$2 fixtures=$3
source "$here/lib.sh"

out=$("$tokenhost" --log-level warn plugins inspect kvcache.paged)
grep -q "block_size (int, default 16, 1..1024): Token positions per KV block." <<<"$out" || { echo "FAIL: inspect text:"; echo "$out"; exit 1; }
echo "ok: inspect names each key's type, default and range"
# A float default as the manifest writes it, not as a double's 17 digits; a whole one stays a float.
out=$("$tokenhost" --log-level warn plugins inspect spec_decode.suffix)
grep -qF "min_score (float, default 0.1, 0..1)" <<<"$out" && grep -qF "spec_factor (float, default 1.0, 0..16)" <<<"$out" ||
  { echo "FAIL: float defaults:"; echo "$out"; exit 1; }
echo "ok: float defaults shortest"
json=$("$tokenhost" --log-level warn plugins inspect kvcache.paged --json)
python3 - "$json" <<'PY'
import json, sys
c = json.loads(sys.argv[1])["config"]["block_size"]
assert c == {"type": "int", "default": 16, "min": 1, "max": 1024, "doc": "Token positions per KV block."}, c
PY
echo "ok: inspect --json carries default, min and max"

# A plugin folder whose plugin.toml does not read: inspect says why it was skipped.
mkdir -p "$work/plugins/broken"
printf '[plugin]\nid = "scheduler.broken"\nkind = "schedulr"\nversion = "1.0.0"\nabi = "1.2"\nlibrary = "x.so"\n' \
  >"$work/plugins/broken/plugin.toml"
rc=0
"$tokenhost" --log-level warn plugins inspect scheduler.broken --plugin-path "$work/plugins" >"$work/out" 2>&1 || rc=$?
[ "$rc" = 1 ] || { echo "FAIL: inspect of a skipped plugin exited $rc"; cat "$work/out"; exit 1; }
grep -q "no plugin 'scheduler.broken'" "$work/out" && grep -qE "skipped: .*broken/plugin.toml:3:[0-9]+: unknown plugin kind 'schedulr'" "$work/out" ||
  { echo "FAIL: inspect of a skipped plugin said:"; cat "$work/out"; exit 1; }
echo "ok: inspect of a skipped plugin says why it was skipped"

# The admin API lists the same defaults and ranges.
start_server "$tokenhost" "$here/../../manifests/default.toml"
curl -sf "${auth[@]}" "$admin/admin/plugins" >"$work/plugins.json"
python3 - "$work/plugins.json" <<'PY'
import json, sys
plugins = {p["id"]: p for p in json.load(open(sys.argv[1]))["plugins"]}
c = plugins["kvcache.paged"]["config"]["n_blocks"]
assert c["default"] == 1024 and c["min"] == 1 and c["max"] == 2147483647 and c["type"] == "int", c
assert plugins["moe.topk"]["config"]["weights"]["default"] == "model"
PY
echo "ok: /admin/plugins carries each key's default and range"
