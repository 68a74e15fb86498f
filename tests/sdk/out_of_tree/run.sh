#!/usr/bin/env bash
# Installs the SDK from the tokenhost build into a private prefix, builds the plugin in this folder as
# an outside project against that prefix alone (find_package(tokenhost) + tokenhost_add_plugin), and
# has the tokenhost binary load it. Usage: run.sh BUILD_DIR PLUGIN_SOURCE_DIR WORK_DIR TOKENHOST_BINARY
set -euo pipefail
build=$1 source=$2 work=$3 tokenhost=$4
rm -rf "$work"
mkdir -p "$work"
cp -r "$source" "$work/src"   # outside the source tree: nothing can reach tokenhost's sources by path
cmake --install "$build" --prefix "$work/prefix" --component sdk >/dev/null
test -f "$work/prefix/include/tokenhost/tokenhost.h"
cmake -S "$work/src" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >/dev/null
out=$("$tokenhost" --log-level warn plugins inspect --plugin-path "$work/build" router.out_of_tree)
echo "$out"
grep -q "loads: yes (library 0.3.0, ABI 1.1)" <<<"$out"
echo "out-of-tree plugin built against the installed SDK and loaded"
