// tokenhost-conformance PLUGIN.toml: checks one plugin library against the rules of its kind
// (conformance.hpp lists them). Exit status 0 when every rule that applies passes, 1 when one fails,
// 2 when the plugin cannot be loaded at all.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <random>

#include "conformance/conformance.hpp"
#include "plugin/library.hpp"

using namespace tokenhost;
using namespace tokenhost::conformance;

int main(int argc, char** argv) {
  CLI::App app{"Checks a tokenhost plugin library against the rules of its kind: each rule on fresh random\n"
               "inputs, through the host's own loader. Prints PASS, FAIL (with what was wrong) or N/A (the\n"
               "plugin's check() refuses what the rule needs) per rule; exits 0 when none fails.",
               "tokenhost-conformance"};
  std::string manifest;
  Options options;
  options.seed = std::random_device{}();
  std::string log_level = "warn";
  app.add_option("PLUGIN_TOML", manifest, "the plugin.toml beside the plugin's library")->required();
  app.add_option("--seed", options.seed, "random seed (printed by every run, to replay it)");
  app.add_option("--rounds", options.rounds, "random cases per rule (default 12)")->check(CLI::Range(1u, 10000u));
  app.add_option("--log-level", log_level, "host log level: trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  std::printf("tokenhost-conformance: %s, seed %llu (--seed %llu replays it)\n", manifest.c_str(),
              (unsigned long long)options.seed, (unsigned long long)options.seed);
  Report report;
  try {
    report = run(manifest, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenhost-conformance: cannot load the plugin: %s\n", e.what());
    return 2;
  }
  for (const auto& o : report.outcomes()) {
    switch (o.verdict) {
      case Outcome::Verdict::passed: std::printf("PASS %s\n", o.rule.c_str()); break;
      case Outcome::Verdict::failed: std::printf("FAIL %s: %s\n", o.rule.c_str(), o.detail.c_str()); break;
      case Outcome::Verdict::not_applicable: std::printf("N/A  %s: %s\n", o.rule.c_str(), o.detail.c_str()); break;
    }
  }
  const size_t failed = report.count(Outcome::Verdict::failed);
  std::printf("conformance: %zu passed, %zu failed, %zu not applicable\n", report.count(Outcome::Verdict::passed), failed,
              report.count(Outcome::Verdict::not_applicable));
  return failed == 0 ? 0 : 1;
}
