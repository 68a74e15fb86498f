// plugin.toml: the in-tree manifests read; mistakes are errors at file:line:column.
#include <catch2/catch.hpp>

#include <algorithm>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "harness.hpp"
#include "plugin/plugin_manifest.hpp"

namespace plugin_manifest_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

std::string error_of(const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / ("tokenhost-plugin-" + std::to_string(getpid()) + ".toml");
  std::ofstream(path) << text;
  std::string out = "(no error)";
  try {
    read_plugin_manifest(path.string());
  } catch (const ManifestError& e) {
    REQUIRE(e.file() == path.string());
    out = std::to_string(e.line()) + ":" + std::to_string(e.column()) + ": " + e.message();
  }
  std::filesystem::remove(path);
  return out;
}

const std::string kHead = "[plugin]\nid = \"scheduler.x\"\nkind = \"scheduler\"\nversion = \"1.0.0\"\nabi = \"1.0\"\nlibrary = \"x.so\"\n";

}  // namespace

TEST_CASE("plugin manifest: every in-tree plugin.toml reads, with typed documented defaults", "[manifest]") {
  auto all = builtin_catalog().all();
  REQUIRE(all.size() >= 6);
  REQUIRE(builtin_catalog().scan_errors().empty());
  for (const auto& kind : kind_names()) {
    INFO(kind);
    REQUIRE(std::any_of(all.begin(), all.end(), [&](const PluginManifest& m) { return kind_name(m.kind) == kind; }));
  }
  auto fifo = *builtin_catalog().find("scheduler.fifo");
  REQUIRE(fifo.param("max_prefill_chunk") != nullptr);
  REQUIRE(fifo.param("max_prefill_chunk")->type == ParamType::integer);
  REQUIRE_FALSE(fifo.param("max_prefill_chunk")->doc.empty());
  REQUIRE(fifo.defaults.get("max_prefill_chunk")->value<int64_t>() == 256);
}

TEST_CASE("plugin manifest: mistakes are reported at file:line:column", "[manifest]") {
  CHECK(error_of(kHead) == "(no error)");
  CHECK(error_of(kHead + "kindd = \"x\"\n") == "7:1: unknown key 'kindd' in [plugin] (did you mean 'kind'?)");
  CHECK(error_of("[plugin]\nid = \"scheduler.x\"\nkind = \"schedular\"\n") ==
        "3:8: unknown plugin kind 'schedular' (did you mean 'scheduler'?)");
  CHECK(error_of("[plugin]\nid = \"router.x\"\nkind = \"scheduler\"\n") ==
        "2:6: plugin id 'router.x' must be 'scheduler.<name>' for kind 'scheduler'");
  CHECK(error_of("[plugin]\nid = \"scheduler.x\"\nkind = \"scheduler\"\nversion = \"1\"\nabi = \"one\"\n") ==
        "5:7: 'abi' in [plugin] must be \"<major>.<minor>\", e.g. \"1.0\", found \"one\"");
  CHECK(error_of("[plugin]\nid = \"scheduler.x\"\nkind = \"scheduler\"\nversion = \"1\"\n") ==
        "1:1: missing key 'abi' in [plugin] (expected a string)");
  CHECK(error_of(kHead + "[config.n]\ntype = \"int\"\ndefault = \"many\"\ndoc = \"d\"\n") ==
        "9:11: 'n' in [config.n] must be int, found a string");
  CHECK(error_of(kHead + "[config.n]\ntype = \"integer\"\ndefault = 1\ndoc = \"d\"\n") ==
        "8:8: unknown type 'integer' in [config.n] (did you mean 'int'?)");
  CHECK(error_of(kHead + "[config.n]\ntype = \"int\"\ndefault = 1\n") == "7:1: missing key 'doc' in [config.n] (expected a string)");
  CHECK(error_of(kHead + "[config.n]\ntype = \"int\"\ndefault = 9\nmax = 4\ndoc = \"d\"\n") ==
        "9:11: 'n' in [config.n] is out of range [-inf, 4]");
  CHECK(error_of(kHead + "devices = [\"gpu\"]\n") == "7:11: unknown device 'gpu' in [plugin] devices (did you mean 'cpu'?)");
  // Found by fuzz_plugin_manifest: a float bound of an int (listing it converted 65E36 to an int).
  CHECK(error_of(kHead + "[config.n]\ntype = \"int\"\ndefault = 1\nmax = 65E36\ndoc = \"d\"\n") ==
        "10:7: 'max' of the int [config.n] must be an integer, found a float");
}

}  // namespace plugin_manifest_tests
