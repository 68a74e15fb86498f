// The host's layering, read from its sources: the HTTP layer frames bytes and leaves a request's life
// (admission, routing, its sequences) to host/request/.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace fs = std::filesystem;

namespace {

// Every C++ source and header under host/<folder>, with its text.
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
