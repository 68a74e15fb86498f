#!/usr/bin/env bash
# What a vendor does with the SDK archive, with nothing else: unpacks it into an empty folder, checks
# the CMake package's version rules, builds both example plugins (plain C and C++) against it alone,
# runs the archive's tokenhost-conformance on them, then loads them into a running server and swaps
# them in live while it serves.
# Usage: sdk_archive.sh ARCHIVE TOKENHOST_BINARY TESTS_CLI_DIR
set -euo pipefail
archive=$1 tokenhost=$2 cli=$3
source "$cli/lib.sh"   # work (removed at exit), start_server, the admin token

mkdir "$work/unpacked"
tar xzf "$archive" -C "$work/unpacked"
sdk=$(echo "$work"/unpacked/tokenhost-sdk-*)
test -d "$sdk" || { echo "FAIL: the archive has no tokenhost-sdk-* folder"; exit 1; }
for f in include/tokenhost/tokenhost.h include/tokenhost/plugin.hpp lib/cmake/tokenhost/tokenhostConfig.cmake \
         lib/cmake/tokenhost/tokenhostConfigVersion.cmake share/tokenhost/sdk/GUIDE.md bin/tokenhost-conformance \
         share/tokenhost/sdk/examples/c_scheduler/shortest_first.c share/tokenhost/sdk/examples/cpp_router/least_loaded_router.cpp; do
  test -f "$sdk/$f" || { echo "FAIL: the archive lacks $f"; exit 1; }
done
echo "ok: the archive holds the headers, the CMake package, the guide, both examples and tokenhost-conformance"

# The package's version is the headers' ABI: the same or an older minor of its major is accepted, a
# newer minor or another major (0.x included) refused, and tokenhost_ABI_VERSION says which.
common=$sdk/include/tokenhost/th_common.h
major=$(sed -n 's/^#define TH_ABI_VERSION_MAJOR \([0-9]*\)$/\1/p' "$common")
minor=$(sed -n 's/^#define TH_ABI_VERSION_MINOR \([0-9]*\)$/\1/p' "$common")
probe() {  # probe VERSION: configures a project that asks find_package(tokenhost VERSION)
  mkdir -p "$work/probe_$1"
  printf 'cmake_minimum_required(VERSION 3.16)\nproject(probe NONE)\nfind_package(tokenhost %s REQUIRED)\nif(NOT tokenhost_ABI_VERSION STREQUAL "%s")\n  message(FATAL_ERROR "tokenhost_ABI_VERSION is ${tokenhost_ABI_VERSION}")\nendif()\n' \
    "$1" "$major.$minor" >"$work/probe_$1/CMakeLists.txt"
  cmake -S "$work/probe_$1" -B "$work/probe_$1/build" -DCMAKE_PREFIX_PATH="$sdk" >"$work/probe_$1.log" 2>&1
}
for accepted in "$major.$minor" "$major.0" "$major"; do
  probe "$accepted" || { cat "$work/probe_$accepted.log"; echo "FAIL: find_package(tokenhost $accepted) refused"; exit 1; }
done
for refused in "$major.$((minor + 1))" "$((major + 1)).0" "0.1" "0.0"; do
  if probe "$refused"; then echo "FAIL: find_package(tokenhost $refused) accepted ABI $major.$minor"; exit 1; fi
done
echo "ok: find_package(tokenhost X.Y) accepts $major.$minor and older minors of $major, refuses the rest"
# The source tree's sdk/ is a package too (tokenhost_DIR pointing at sdk/cmake), and a project of its
# own whose install holds the same headers and CMake files.
mkdir -p "$work/probe_source"
printf 'cmake_minimum_required(VERSION 3.16)\nproject(probe NONE)\nfind_package(tokenhost %s REQUIRED)\n' "$major.$minor" >"$work/probe_source/CMakeLists.txt"
cmake -S "$work/probe_source" -B "$work/probe_source/build" -Dtokenhost_DIR="$cli/../../sdk/cmake" >"$work/probe_source.log" 2>&1 ||
  { cat "$work/probe_source.log"; echo "FAIL: find_package(tokenhost) on the source tree's sdk/"; exit 1; }
cmake -S "$cli/../../sdk" -B "$work/sdk_alone" >"$work/sdk_alone.log" 2>&1 && cmake --install "$work/sdk_alone" --prefix "$work/sdk_alone_prefix" >>"$work/sdk_alone.log" 2>&1 ||
  { cat "$work/sdk_alone.log"; echo "FAIL: sdk/ as a project of its own"; exit 1; }
diff -r "$sdk/include" "$work/sdk_alone_prefix/include" && diff -r "$sdk/lib" "$work/sdk_alone_prefix/lib" ||
  { echo "FAIL: sdk/ alone installs other headers or CMake files than the archive holds"; exit 1; }
echo "ok: the source tree's sdk/ is a package and a project of its own"

# Both examples, built against the unpacked archive alone, pass the conformance runner.
for example in c_scheduler cpp_router; do
  cp -r "$sdk/share/tokenhost/sdk/examples/$example" "$work/$example"
  cmake -S "$work/$example" -B "$work/$example/build" -DCMAKE_PREFIX_PATH="$sdk" -DCMAKE_BUILD_TYPE=Release >"$work/$example.log" 2>&1 ||
    { cat "$work/$example.log"; echo "FAIL: configuring $example"; exit 1; }
  cmake --build "$work/$example/build" >>"$work/$example.log" 2>&1 || { cat "$work/$example.log"; echo "FAIL: building $example"; exit 1; }
  "$sdk/bin/tokenhost-conformance" "$work/$example/build/plugin.toml" >"$work/$example.conformance" 2>&1 ||
    { cat "$work/$example.conformance"; echo "FAIL: $example does not pass tokenhost-conformance"; exit 1; }
  grep -E "^conformance: [1-9][0-9]* passed, 0 failed" "$work/$example.conformance"
done
echo "ok: both examples build against the archive alone and pass tokenhost-conformance"
# "Build against the oldest minor you need" from the archive alone: -DTOKENHOST_ABI=1.N takes the frozen
# headers of minor N (include/tokenhost-abi/), the package's version becomes N, and the plugin's
# descriptor declares N; a minor the SDK does not have is refused, naming those it has.
old_minor=2
test -f "$sdk/include/tokenhost-abi/$major.$old_minor/tokenhost/th_common.h" ||
  { echo "FAIL: the archive lacks the frozen headers of $major.$old_minor"; exit 1; }
cp -r "$sdk/share/tokenhost/sdk/examples/c_scheduler" "$work/c_scheduler_old"
sed -i "s/^abi = \".*\"/abi = \"$major.$old_minor\"/" "$work/c_scheduler_old/plugin.toml"
sed -i "s/find_package(tokenhost [0-9.]* REQUIRED)/find_package(tokenhost $major.$old_minor REQUIRED)/" "$work/c_scheduler_old/CMakeLists.txt"
cmake -S "$work/c_scheduler_old" -B "$work/c_scheduler_old/build" -DCMAKE_PREFIX_PATH="$sdk" -DTOKENHOST_ABI="$major.$old_minor" \
  >"$work/c_scheduler_old.log" 2>&1 && cmake --build "$work/c_scheduler_old/build" >>"$work/c_scheduler_old.log" 2>&1 ||
  { cat "$work/c_scheduler_old.log"; echo "FAIL: building c_scheduler against the frozen $major.$old_minor headers"; exit 1; }
"$sdk/bin/tokenhost-conformance" "$work/c_scheduler_old/build/plugin.toml" >"$work/c_scheduler_old.conformance" 2>&1 ||
  { cat "$work/c_scheduler_old.conformance"; echo "FAIL: the $major.$old_minor build does not pass tokenhost-conformance"; exit 1; }
# The loader refuses a library whose descriptor's ABI differs from its plugin.toml's: it loaded, so
# the descriptor declares the frozen minor.
grep -q "^abi = \"$major.$old_minor\"" "$work/c_scheduler_old/build/plugin.toml" ||
  { echo "FAIL: the build's plugin.toml does not declare $major.$old_minor"; exit 1; }
if cmake -S "$work/c_scheduler_old" -B "$work/c_scheduler_bad" -DCMAKE_PREFIX_PATH="$sdk" -DTOKENHOST_ABI="$major.99" >"$work/bad.log" 2>&1 ||
   ! tr -s ' \n' ' ' < "$work/bad.log" | grep -q "TOKENHOST_ABI=$major.99: this SDK (ABI $major.$minor) has no frozen headers of that minor; it has $major.0, $major.1, "; then
  cat "$work/bad.log"; echo "FAIL: TOKENHOST_ABI=$major.99 was not refused with the minors the SDK has"; exit 1
fi
echo "ok: -DTOKENHOST_ABI=$major.$old_minor builds against the archive's frozen $major.$old_minor headers (conformance passes); an unknown minor is refused"
# plugin.toml is a build input: edited alone, the next build updates the copy beside the library (a
# changed id or version re-runs the configure step, and the descriptor follows: TH_PLUGIN_ID).
sed -i 's/^description = .*/description = "Edited after the first build."/' "$work/c_scheduler/plugin.toml"
cmake --build "$work/c_scheduler/build" >>"$work/c_scheduler.log" 2>&1 || { cat "$work/c_scheduler.log"; echo "FAIL: rebuilding c_scheduler"; exit 1; }
grep -q '^description = "Edited after the first build."' "$work/c_scheduler/build/plugin.toml" ||
  { echo "FAIL: editing plugin.toml and building again left the old copy beside the library"; exit 1; }
sed -i 's/^version = "1.0.0"/version = "1.0.1"/' "$work/c_scheduler/plugin.toml"
cmake --build "$work/c_scheduler/build" >>"$work/c_scheduler.log" 2>&1 || { cat "$work/c_scheduler.log"; echo "FAIL: rebuilding c_scheduler"; exit 1; }
"$sdk/bin/tokenhost-conformance" "$work/c_scheduler/build/plugin.toml" >"$work/c_scheduler.conformance" 2>&1 ||
  { cat "$work/c_scheduler.conformance"; echo "FAIL: after a version edit the library and its plugin.toml disagree"; exit 1; }
sed -i 's/^version = "1.0.1"/version = "1.0.0"/' "$work/c_scheduler/plugin.toml"  # as the server test below expects
cmake --build "$work/c_scheduler/build" >>"$work/c_scheduler.log" 2>&1 || { cat "$work/c_scheduler.log"; echo "FAIL: rebuilding c_scheduler"; exit 1; }
echo "ok: plugin.toml edited alone: the next build copies it, and a new version reaches the descriptor"

# Loaded into a running server and swapped in live while requests stream.
# As a vendor's plugin is installed: its folder is one of the deployment's plugin folders.
sed "/^\[server\]/a plugin_paths = [\"$work/c_scheduler/build\", \"$work/cpp_router/build\"]" \
  "$cli/../../manifests/default.toml" > "$work/vendor.toml"
start_server "$tokenhost" "$work/vendor.toml"
complete() {
  curl -sf "http://127.0.0.1:$gw/v1/completions" \
    -d '{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "ignore_eos": true}' | grep -q '"finish_reason":"length"'
}
load_pids=()
for _ in 1 2 3 4; do (for _ in 1 2 3 4 5; do complete || exit 1; done) & load_pids+=($!); done
admin_ok 'registered scheduler.example_c' plugins load "$work/c_scheduler/build/plugin.toml"
admin_ok 'scheduler.continuous 1.0.0 -> scheduler.example_c 1.0.0' swap main scheduler scheduler.example_c --set max_prefill_chunk=16
admin_ok 'registered router.example_cpp' plugins load "$work/cpp_router/build/plugin.toml"
admin_ok 'router.round_robin 1.0.0 -> router.example_cpp 1.0.0' router router.example_cpp
for p in "${load_pids[@]}"; do wait "$p" || { echo "FAIL: a request failed while the examples were swapped in"; exit 1; }; done
complete || { echo "FAIL: a request after the swaps"; exit 1; }
admin_ok 'scheduler +scheduler.example_c 1.0.0' status
admin_ok 'router router.example_cpp 1.0.0' status
echo "ok: both examples loaded into a running server and swapped in live; every request finished"
echo "SDK archive: unpacked, built, checked, served"
