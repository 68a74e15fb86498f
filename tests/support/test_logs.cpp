// Host logs during tests: warnings and errors only, unless TOKENHOST_TEST_LOG names a level
// (trace, debug, info, ...), so that a failing test's output shows what matters.
#define CATCH_CONFIG_EXTERNAL_INTERFACES  // the listener base class
#include <catch2/catch.hpp>

#include <cstdlib>

#include <spdlog/spdlog.h>

namespace {

struct TestLogLevel : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunStarting(const Catch::TestRunInfo&) override {
    const char* level = std::getenv("TOKENHOST_TEST_LOG");
    spdlog::set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(TestLogLevel)
