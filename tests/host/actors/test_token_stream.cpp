// TokenStream and StreamSignal: a reader of several streams sleeps until any of them changes.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "actors/token_stream.hpp"

namespace actors_token_stream_tests {

using namespace tokenhost;
using namespace std::chrono_literals;

TEST_CASE("token stream: a signal shared by several streams wakes its reader on any stream's change",
          "[token_stream]") {
  auto signal = std::make_shared<StreamSignal>();
  TokenStream a, b, c;
  for (TokenStream* s : {&a, &b, &c}) s->listen(signal);
  uint64_t seen = signal->version();

  // A token on the third stream, from another thread, ends a wait of 10 s at once.
  SampledToken t;
  t.token = 42;
  std::thread writer([&] {
    std::this_thread::sleep_for(20ms);
    c.push(t);
  });
  const auto started = std::chrono::steady_clock::now();
  signal->wait(seen, 10s);
  const auto waited = std::chrono::steady_clock::now() - started;
  writer.join();
  CHECK(waited < 5s);
  CHECK(signal->version() != seen);
  REQUIRE(c.wait(0, 0ms).tokens.size() == 1);
  CHECK(a.wait(0, 0ms).tokens.empty());

  // A change made before the wait (after the version was read) is not missed: the wait returns.
  seen = signal->version();
  b.finish(GenerateResult{});
  const auto again = std::chrono::steady_clock::now();
  signal->wait(seen, 10s);
  CHECK(std::chrono::steady_clock::now() - again < 1s);
  // Cancelling counts as a change too; with no change, the wait lasts its timeout.
  seen = signal->version();
  a.cancel();
  CHECK(signal->version() == seen + 1);
  seen = signal->version();
  const auto idle = std::chrono::steady_clock::now();
  signal->wait(seen, 50ms);
  CHECK(std::chrono::steady_clock::now() - idle >= 50ms);
}

}  // namespace actors_token_stream_tests
