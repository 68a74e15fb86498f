// The slot table (plugin/kind.hpp): one row per kind, and the manifest reader, the admin operations
// and the engine's actors acting as its rows say.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "plugin/kind.hpp"
#include "test_server.hpp"

namespace plugin_slots_tests {

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

TEST_CASE("slots: a slot id is its row, found by kind and by name, and instances are held by slot", "[slots]") {
  REQUIRE(all_slots().size() == slot_table().size());
  for (size_t i = 0; i < slot_table().size(); ++i) {
    const SlotId id = all_slots()[i];
    INFO(id.name());
    REQUIRE(id.index() == i);
    REQUIRE(&id.info() == &slot_table()[i]);
    REQUIRE(slot_of(id.kind()) == id);
    REQUIRE(slot_named(id.name()) == id);
  }
  REQUIRE_FALSE(slot_named("attn"));
  REQUIRE_THROWS_AS(slot_of(th_kind(999)), std::logic_error);
  size_t owned = 0;
  for (SlotOwner owner : {SlotOwner::router, SlotOwner::engine, SlotOwner::worker})
    for (SlotId id : slots_owned_by(owner)) {
      REQUIRE(id.info().owner == owner);
      ++owned;
    }
  REQUIRE(owned == slot_table().size());

  // One instance per slot, replaced whole; a stacking slot's list keeps its order; slots are apart.
  auto a = make_plugin("scheduler.fifo", model_spec());
  auto b = make_plugin("scheduler.static", model_spec());
  const SlotId sched = slot_of(TH_KIND_SCHEDULER), spec = slot_of(TH_KIND_SPEC_DECODE);
  SlotInstances held;
  for (SlotId id : all_slots()) REQUIRE(held.get(id) == nullptr);
  held.set(sched, a);
  REQUIRE(held.get(sched) == a.get());
  REQUIRE(held.get(spec) == nullptr);
  held.set(sched, b);
  REQUIRE(held.get(sched) == b.get());
  REQUIRE(held.stack(sched).size() == 1);
  REQUIRE(a.use_count() == 1);  // the replaced instance is released
  held.stack(spec) = {a, b};
  REQUIRE(held.get(spec) == a.get());
  REQUIRE(held.stack(spec).back() == b);
  held.set(spec, nullptr);
  REQUIRE(held.stack(spec).empty());
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

}  // namespace plugin_slots_tests
