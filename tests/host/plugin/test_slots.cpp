// The slot table (plugin/kind.hpp): one row per kind, and the manifest reader, the admin operations
// and the engine's actors acting as its rows say.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "plugin/kind.hpp"
#include "test_server.hpp"

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

TEST_CASE("slots: one row per ABI kind, each naming its header, with rules that agree", "[slots]") {
  std::set<th_kind> kinds;
  for (const SlotInfo& s : slot_table()) {
    INFO(s.name);
    REQUIRE(kinds.insert(s.kind).second);
    REQUIRE(kind_name(s.kind) == s.name);
    REQUIRE(std::filesystem::is_regular_file(std::string(TOKENHOST_SOURCE_DIR) + "/sdk/include/tokenhost/" + s.header));
    REQUIRE(find_slot(s.name) == &s);
    if (s.unloadable) REQUIRE(s.need == SlotNeed::optional);  // a required slot cannot be emptied
    if (s.swap == SwapMode::new_engine) REQUIRE(s.owner == SlotOwner::worker);
  }
  REQUIRE(kinds.size() == kind_names().size());
  REQUIRE(find_slot("attn") == nullptr);
  REQUIRE(slot_required(*find_slot("moe"), 8));
  REQUIRE_FALSE(slot_required(*find_slot("moe"), 0));
  REQUIRE_FALSE(slot_required(*find_slot("spec_decode"), 8));
}

TEST_CASE("slots: a manifest lacking a required slot names it, and the router takes its default plugin", "[slots][manifest]") {
  for (const std::string& slot : engine_slot_names()) {
    const SlotInfo& info = *find_slot(slot);
    if (info.need != SlotNeed::always) continue;
    INFO(slot);
    std::string manifest = test_manifest();
    const size_t at = manifest.find("\n" + slot + " = ");
    REQUIRE(at != std::string::npos);
    manifest.erase(at, manifest.find('\n', at + 1) - at);
    REQUIRE_THROWS_WITH(read_deployment("t.toml", manifest), Contains("has no [engines.main." + slot + "] slot"));
  }
  REQUIRE(read_deployment("t.toml", test_manifest()).router.plugin == find_slot("router")->default_plugin);
}

TEST_CASE("slots: the admin operations follow each slot's owner, swap mode and unloadability", "[slots][server]") {
  auto server = make_test_server();
  auto status = server->status();
  for (const std::string& slot : engine_slot_names()) {
    const SlotInfo& info = *find_slot(slot);
    INFO(slot);
    // Every filled engine slot is in the engine's status under its name.
    if (info.need == SlotNeed::always) REQUIRE(status["engines"][0][slot].is_object());
    if (!info.unloadable) REQUIRE_THROWS_WITH(server->unload_slot("main", slot), Contains("is required"));
  }
  REQUIRE_THROWS_WITH(server->set_slot("main", "attn", "attention.reference", {}), Contains("no slot 'attn'"));
  REQUIRE_THROWS_WITH(server->set_slot("main", "router", "router.round_robin", {}), Contains("belongs to the server"));
  REQUIRE_THROWS_WITH(server->set_slot("main", "moe", "moe.topk", {}), Contains("dense model"));
  // spec_decode: optional and unloadable.
  REQUIRE_THAT(server->set_slot("main", "spec_decode", "spec_decode.ngram", {}), Contains("spec_decode.ngram"));
  REQUIRE(server->status()["engines"][0]["spec_decode"]["id"] == "spec_decode.ngram");
  REQUIRE_THAT(server->unload_slot("main", "spec_decode"), Contains("(none)"));
  // kvcache: a new engine beside the old one.
  REQUIRE_THAT(server->set_slot("main", "kvcache", "kvcache.paged", {}), Contains("a new engine"));
  REQUIRE(server->gateway().generate(request_for(*server, "after the swaps", 4)).finish_reason == "length");
}
