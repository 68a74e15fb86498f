// The host's layering and naming rules, read from its sources: the HTTP layer frames bytes and leaves a
// request's life (admission, routing, its sequences) to host/request/; slots are named by the table.
#include <catch2/catch.hpp>

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>

#include "plugin/kind.hpp"

namespace layout_layers_tests {

namespace fs = std::filesystem;
using namespace tokenhost;

namespace {

// Every C++ source and header under host/<folder> (all of host/ for ""), with its path and text.
std::vector<std::pair<std::string, std::string>> sources_in(const std::string& folder) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(TOKENHOST_SOURCE_DIR) / "host" / folder)) {
    const auto ext = entry.path().extension();
    if (ext != ".cpp" && ext != ".hpp") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    out.emplace_back(fs::relative(entry.path(), TOKENHOST_SOURCE_DIR).string(), text.str());
  }
  return out;
}

}  // namespace

TEST_CASE("layers: nothing under host/http admits, routes or starts a request's sequences", "[layers]") {
  // Admission (server/admission.hpp, Gateway::admit), the router and its messages, a sequence's
  // request and its start or cancel (Gateway::start, Gateway::cancel): host/request/'s and below.
  const std::regex forbidden(
      R"(\badmit\s*\(|\bAdmission\w*|\brouter_actor\b|\bspawn_router\b|\bgenerate_atom\b|\bcancel_atom\b|\bGenerateRequest\b|)"
      R"(\bnext_sequence_id\b|server/admission\.hpp|actors/router\.hpp|actors/messages\.hpp|gateway(\(\))?\s*(\.|->)\s*(start|cancel)\s*\()");
  const auto files = sources_in("http");
  REQUIRE(files.size() > 10);
  for (const auto& [path, text] : files) {
    std::smatch m;
    const bool found = std::regex_search(text, m, forbidden);
    INFO(path << " uses " << (found ? m.str() : std::string()));
    CHECK_FALSE(found);
  }
  // The check itself finds such a call where there is one.
  CHECK(std::regex_search(std::string("auto t = gateway.admit(ask);"), forbidden));
  CHECK(std::regex_search(std::string("server_.gateway().start(std::move(g));"), forbidden));
}

TEST_CASE("slots: host code names no slot by a string literal outside the slot table", "[layers][slots]") {
  // A slot is named in code by its kind's ABI constant (slot_of(TH_KIND_...)); its name lives in the
  // table (plugin/kind.cpp). The CLI's help and output (host/cli) and the conformance runner's
  // messages (host/conformance) may spell names out.
  std::string names;
  for (const SlotInfo& slot : slot_table()) names += std::string(names.empty() ? "" : "|") + slot.name;
  const std::regex literal("\"(" + names + ")\"");
  const std::regex comment(R"((^|\s)//.*$)");
  size_t files = 0;
  for (const auto& [path, text] : sources_in("")) {
    if (path == "host/plugin/kind.cpp" || path.rfind("host/cli/", 0) == 0 || path.rfind("host/conformance/", 0) == 0) continue;
    ++files;
    std::istringstream lines(text);
    std::string line;
    for (size_t n = 1; std::getline(lines, line); ++n) {
      const std::string code = std::regex_replace(line, comment, "");
      std::smatch m;
      const bool found = std::regex_search(code, m, literal);
      INFO(path << ":" << n << ": " << line);
      CHECK_FALSE(found);
    }
  }
  CHECK(files > 100);
  // The check finds a literal where there is one, and not in a comment.
  CHECK(std::regex_search(std::string("if (slot == \"kvcache\") return;"), literal));
  CHECK_FALSE(std::regex_search(std::regex_replace(std::string("  x = 1;  // the \"kvcache\" slot"), comment, ""), literal));
}

TEST_CASE("layers: every include in host/ points down the order the README's Layout states", "[layers]") {
  // A folder includes its own files and those of folders below it, never above, in the order the
  // README's Layout states on its line "Include order, bottom first: a, b, ...": a new folder takes
  // its place there.
  std::ifstream readme(std::string(TOKENHOST_SOURCE_DIR) + "/README.md");
  std::string text((std::istreambuf_iterator<char>(readme)), std::istreambuf_iterator<char>());
  const std::string marker = "Include order, bottom first: ";
  const size_t at = text.find(marker);
  REQUIRE(at != std::string::npos);
  std::vector<std::string> order;
  const std::string listed = text.substr(at + marker.size(), text.find('.', at) - at - marker.size());
  const std::regex word("[a-z_]+");
  for (auto it = std::sregex_iterator(listed.begin(), listed.end(), word); it != std::sregex_iterator(); ++it)
    order.push_back(it->str());
  REQUIRE(order.size() > 10);
  auto rank = [&](const std::string& folder) {
    auto it = std::find(order.begin(), order.end(), folder);
    return it == order.end() ? -1 : int(it - order.begin());
  };
  const std::regex include(R"re(^\s*#\s*include\s+"([a-z_]+)/)re");
  size_t checked = 0;
  for (const auto& [path, text] : sources_in("")) {
    const std::string folder = path.substr(5, path.find('/', 5) - 5);  // "host/<folder>/..."
    INFO(path);
    REQUIRE(rank(folder) >= 0);  // a folder the order does not place
    std::istringstream lines(text);
    std::string line;
    for (size_t n = 1; std::getline(lines, line); ++n) {
      std::smatch m;
      if (!std::regex_search(line, m, include)) continue;
      const std::string target = m[1];
      INFO(path << ":" << n << ": " << line);
      REQUIRE(rank(target) >= 0);
      CHECK((target == folder || rank(target) < rank(folder)));
      ++checked;
    }
  }
  CHECK(checked > 300);
  // The rule catches an include that points up.
  std::smatch m;
  const std::string up = "#include \"runtime/sampling.hpp\"";
  REQUIRE(std::regex_search(up, m, include));
  CHECK(rank(m[1]) > rank("backends"));
}

}  // namespace layout_layers_tests
