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
# The package's version check: a newer minor or another major (0.x included) is refused, the same or an
# older minor of this major accepted, and tokenhost_ABI_VERSION is the headers' ABI.
abi=$(sed -n 's/^#define TH_ABI_VERSION_MAJOR \([0-9]*\)$/\1/p' "$work/prefix/include/tokenhost/th_common.h").$(sed -n 's/^#define TH_ABI_VERSION_MINOR \([0-9]*\)$/\1/p' "$work/prefix/include/tokenhost/th_common.h")
probe() {  # probe VERSION: configures a project that asks find_package(tokenhost VERSION)
  mkdir -p "$work/probe_$1"
  printf 'cmake_minimum_required(VERSION 3.16)\nproject(probe NONE)\nfind_package(tokenhost %s REQUIRED)\nif(NOT tokenhost_ABI_VERSION STREQUAL "%s")\n  message(FATAL_ERROR "tokenhost_ABI_VERSION is ${tokenhost_ABI_VERSION}, the headers say %s")\nendif()\n' "$1" "$abi" "$abi" \
    >"$work/probe_$1/CMakeLists.txt"
  cmake -S "$work/probe_$1" -B "$work/probe_$1/build" -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/probe_$1.log" 2>&1
}
probe 0.1 || { cat "$work/probe_0.1.log"; echo "find_package(tokenhost 0.1) refused"; exit 1; }
probe 0.0 || { cat "$work/probe_0.0.log"; echo "find_package(tokenhost 0.0) refused"; exit 1; }
for refused in 0.2 1.0 1.1; do
  if probe $refused; then echo "find_package(tokenhost $refused) accepted a 0.1 SDK"; exit 1; fi
done
cmake -S "$work/src" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" >/dev/null
out=$("$tokenhost" --log-level warn plugins inspect --plugin-path "$work/build" router.out_of_tree)
echo "$out"
grep -q "loads: yes (library 0.3.0, ABI 1.2)" <<<"$out"
echo "out-of-tree plugin built against the installed SDK and loaded"
