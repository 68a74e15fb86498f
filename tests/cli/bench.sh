#!/usr/bin/env bash
# `tokenhost bench`: --help explains every option; with nothing listening at --url it exits 1 with a
# message that says so; bad option values are refused with the option's name.
set -euo pipefail
tokenhost=$1

help=$($tokenhost bench --help)
for text in --url --endpoint --model --api-key --concurrency --rate --max-concurrency --requests --duration \
            --warmup --prompt-tokens --output-tokens --ignore-eos --shared-prefix-fraction --seed --no-stream \
            --timeout --json --quiet "LO:HI" "normal:MEAN:SD" "arrivals per second" "Seconds to send" \
            "Percentiles interpolate linearly"; do
  grep -qF -- "$text" <<<"$help" || { echo "FAIL: 'bench --help' does not say '$text':"; echo "$help"; exit 1; }
done
echo "ok: bench --help"

expect_error() {  # expect_error PATTERN ARGS...: `tokenhost bench ARGS` exits non-zero and says PATTERN
  local pattern=$1 out rc
  shift
  set +e
  out=$(timeout 60 $tokenhost bench "$@" 2>&1)
  rc=$?
  set -e
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "FAIL: bench $* exited $rc"; echo "$out"; exit 1; }
  grep -qE -- "$pattern" <<<"$out" || { echo "FAIL: bench $* said:"; echo "$out"; echo "expected: $pattern"; exit 1; }
  echo "ok: bench $*: $(head -1 <<<"$out")"
}

expect_error "^tokenhost bench: cannot connect to http://127\.0\.0\.1:1 \(is a server listening there\?\)$" --url http://127.0.0.1:1
expect_error "^tokenhost bench: cannot connect to http://127\.0\.0\.1:1 " --url http://127.0.0.1:1 --model m --requests 3
expect_error "--url is required" --requests 3
expect_error "--url: 'ftp://x': expected http\[s\]://HOST\[:PORT\]\[/PREFIX\]" --url ftp://x
expect_error "--prompt-tokens: '0': token counts must be in \[1, 1000000\]" --url http://127.0.0.1:1 --prompt-tokens 0
expect_error "--output-tokens: '9:3': LO must not exceed HI" --url http://127.0.0.1:1 --output-tokens 9:3
expect_error "--output-tokens: 'normal:5': expected normal:MEAN:SD" --url http://127.0.0.1:1 --output-tokens normal:5
expect_error "--concurrency: Value 0 not in range 1 to 100000" --url http://127.0.0.1:1 --concurrency 0
expect_error "--rate: '-2' is not a positive number of requests per second" --url http://127.0.0.1:1 --rate -2
expect_error "--duration: '0' is not a positive number of seconds" --url http://127.0.0.1:1 --duration 0
expect_error "--rate excludes --concurrency|--concurrency excludes --rate" --url http://127.0.0.1:1 --rate 5 --concurrency 2
expect_error "--max-concurrency requires --rate" --url http://127.0.0.1:1 --max-concurrency 4
expect_error "--shared-prefix-fraction" --url http://127.0.0.1:1 --shared-prefix-fraction 1.5
expect_error "--endpoint" --url http://127.0.0.1:1 --endpoint embeddings
echo "bench refuses what it cannot do, with a clear message"
