// The max_tokens defaults live once (base/request_defaults.hpp); what the README says of them, the
// manifest reader, the gateway's /v1/generate, an in-process request and the CLI all agree with it.
#include <catch2/catch.hpp>

#include <fstream>
#include <iterator>
#include <string>

#include "actors/request.hpp"
#include "base/request_defaults.hpp"
#include "cli/generate_command.hpp"
#include "test_server.hpp"

namespace base_request_defaults_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

std::string readme() {
  std::ifstream in(std::string(TOKENHOST_SOURCE_DIR) + "/README.md");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("defaults: max_tokens's defaults in the README are the code's", "[defaults]") {
  const std::string text = readme();
  const std::string d = std::to_string(kDefaultMaxTokens), g = std::to_string(kGenerateRouteMaxTokens);
  CHECK(text.find("default_max_tokens = " + d + " ") != std::string::npos);                          // the manifest sample
  CHECK(text.find("`max_tokens` (default: `[limits] default_max_tokens`, " + d + ",") != std::string::npos);  // completions
  CHECK(text.find("`max_tokens` defaults to `[limits] default_max_tokens` (" + d + ")") != std::string::npos);
  CHECK(text.find("`max_tokens` (default " + g + ")") != std::string::npos);                         // /v1/generate
  CHECK(text.find("--max-tokens N: tokens at most (default " + std::to_string(kCliMaxTokens) + ")") != std::string::npos);  // the CLI
  CHECK(text.find("up to " + std::to_string(kMaxTokensLimit)) != std::string::npos);
}

TEST_CASE("defaults: the manifest reader, an in-process request and the CLI take them", "[defaults]") {
  CHECK(read_deployment("t.toml", test_manifest()).limits.default_max_tokens == kDefaultMaxTokens);
  CHECK(GenerateRequest{}.max_tokens == kGenerateRouteMaxTokens);
  CHECK(GenerateOptions{}.max_tokens == kCliMaxTokens);
  CHECK_THROWS(read_deployment("t.toml", test_manifest("[limits]\ndefault_max_tokens = " + std::to_string(kMaxTokensLimit + 1) + "\n")));
  CHECK(read_deployment("t.toml", test_manifest("[limits]\ndefault_max_tokens = " + std::to_string(kMaxTokensLimit) + "\n"))
            .limits.default_max_tokens == kMaxTokensLimit);
}

}  // namespace base_request_defaults_tests
