// Each in-tree plugin's README documents every key its plugin.toml declares, with the same type and
// default: the README is what operators read, plugin.toml what the host applies.
#include <catch2/catch.hpp>

#include <charconv>
#include <fstream>
#include <iterator>
#include <sstream>

#include "harness.hpp"

namespace plugin_docs_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

TEST_CASE("plugins: each README's configuration table lists every declared key with plugin.toml's type and default",
          "[plugins][docs]") {
  REQUIRE_FALSE(builtin_catalog().all().empty());
  for (const PluginManifest& m : builtin_catalog().all()) {
    // The README beside the source plugin.toml: plugins/<kind>/<name>/README.md.
    const std::string name = m.id.substr(m.id.find('.') + 1);
    const std::string path = std::string(TOKENHOST_SOURCE_DIR) + "/plugins/" + kind_name(m.kind) + "/" + name + "/README.md";
    std::ifstream in(path);
    INFO(path);
    REQUIRE(in.good());
    const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const ConfigParam& p : m.params) {
      std::ostringstream def;
      m.defaults.get(p.key)->visit([&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (toml::is_string<T>) def << "`" << v.get() << "`";
        else if constexpr (toml::is_boolean<T>) def << (v.get() ? "true" : "false");
        else if constexpr (toml::is_floating_point<T>) {  // as written: the shortest form that reads back
          char text[32];
          const auto end = std::to_chars(text, text + sizeof text, v.get()).ptr;
          def << std::string(text, end) << (std::string(text, end).find_first_of(".e") == std::string::npos ? ".0" : "");
        }
        else def << v;
      });
      const std::string row = "| `" + p.key + "` | " + param_type_name(p.type) + " | " + def.str() + " |";
      INFO("expected a row starting " << row);
      CHECK(readme.find("\n" + row) != std::string::npos);
    }
  }
}

}  // namespace plugin_docs_tests
