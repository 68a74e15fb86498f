// The ABI matrix: a plugin of every kind built against the frozen headers of each released minor
// (sdk/abi/<major.minor>/, tests/fixtures/CMakeLists.txt) loads into this host, declares that minor,
// and serves exactly what the in-tree plugins serve. With it, the growth rule's host side: nothing past
// a struct_size is called or read, and a vtable shorter than its declared minor is refused.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "plugin/abi_member.hpp"
#include "plugin/kind.hpp"
#include "plugin/library.hpp"
#include "test_server.hpp"

namespace plugin_abi_matrix_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

namespace {

constexpr uint32_t kTokens = 8;

struct FrozenAbi {
  std::string version;  // "1.0"
  std::string tag;      // "1_0"
  uint16_t minor;
};

// The minors whose frozen headers the fixtures were built against (TOKENHOST_FROZEN_ABIS in CMake).
std::vector<FrozenAbi> frozen_abis() {
  std::vector<FrozenAbi> out;
  std::stringstream list(TOKENHOST_FROZEN_ABIS);
  for (std::string v; std::getline(list, v, ',');) {
    std::string tag = v;
    tag[tag.find('.')] = '_';
    out.push_back({v, tag, uint16_t(std::stoi(v.substr(v.find('.') + 1)))});
  }
  return out;
}

std::string matrix_fixture(const FrozenAbi& abi, const std::string& kind) {
  return fixture_dir() + "/abi_" + abi.tag + "/" + kind + "/plugin.toml";
}

std::vector<std::vector<int32_t>> outputs(Server& server) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : mixed_prompts()) {
    auto r = server.gateway().generate(request_for(server, p, kTokens));
    INFO("prompt '" << p << "': " << r.finish_reason << " " << r.error);
    REQUIRE(r.finish_reason == "length");
    out.push_back(r.tokens);
  }
  return out;
}



}  // namespace

TEST_CASE("abi matrix: the frozen minors run from 0 through the host's minor, none skipped", "[abi]") {
  // The host's own minor is frozen once released; while the next one is being written only the
  // older ones are.
  const auto abis = frozen_abis();
  REQUIRE(abis.size() >= TH_ABI_VERSION_MINOR);
  REQUIRE(abis.size() <= TH_ABI_VERSION_MINOR + 1u);
  for (uint16_t m = 0; m < abis.size(); ++m) REQUIRE(abis[m].minor == m);
}

TEST_CASE("abi matrix: once the host's own minor is frozen the SDK's headers are its frozen copy", "[abi]") {
  // A released minor never changes: a member appended after its freeze belongs to the next minor.
  const auto abis = frozen_abis();
  if (abis.size() <= TH_ABI_VERSION_MINOR) return;  // not released yet: the next minor is being written
  namespace fs = std::filesystem;
  const fs::path sdk = fs::path(TOKENHOST_SOURCE_DIR) / "sdk/include/tokenhost";
  const fs::path frozen = fs::path(TOKENHOST_SOURCE_DIR) / "sdk/abi" / abis.back().version / "tokenhost";
  auto read = [](const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  size_t headers = 0;
  for (const auto& entry : fs::directory_iterator(sdk)) {
    if (entry.path().extension() != ".h") continue;  // the C ABI; the C++ helpers (.hpp) are not part of it
    ++headers;
    INFO(entry.path().filename().string() << ": changed since ABI " << abis.back().version << " was frozen; bump the minor");
    REQUIRE(fs::exists(frozen / entry.path().filename()));
    CHECK(read(entry.path()) == read(frozen / entry.path().filename()));
  }
  CHECK(headers == size_t(std::distance(fs::directory_iterator(frozen), fs::directory_iterator())));
}

TEST_CASE("abi matrix: a plugin of every kind built against each frozen minor loads and declares that minor", "[abi]") {
  for (const auto& abi : frozen_abis()) {
    for (const std::string& kind : kind_names()) {
      if (vtable_size(*kind_from_name(kind), abi.minor) == 0) continue;  // a kind a later minor added (kv_connector: 1.9)
      INFO("ABI " << abi.version << " " << kind);
      auto lib = PluginLibrary::open(read_plugin_manifest(matrix_fixture(abi, kind)));
      REQUIRE(lib->abi_major() == TH_ABI_VERSION_MAJOR);
      REQUIRE(lib->abi_minor() == abi.minor);
      REQUIRE(lib->id() == kind + ".abi_" + abi.tag);
      REQUIRE(lib->head().struct_size == vtable_size(lib->kind(), abi.minor));
    }
  }
}

TEST_CASE("abi matrix: frozen minors' attention, kvcache, scheduler, router and spec_decode serve the in-tree plugins' tokens",
          "[abi][server]") {
  for (const auto& abi : frozen_abis()) {
    INFO("ABI " << abi.version);
    auto server = make_test_server();  // attention.reference, kvcache.paged, scheduler.fifo, router.round_robin
    const auto expected = outputs(*server);

    REQUIRE_THAT(server->set_slot("", "router", server->register_plugin(matrix_fixture(abi, "router")), {}),
                 Contains("router.abi_" + abi.tag));
    for (const char* slot : {"scheduler", "attention", "spec_decode"}) {
      INFO(slot);
      REQUIRE_THAT(server->set_slot("main", slot, server->register_plugin(matrix_fixture(abi, slot)), {}),
                   Contains(std::string(slot) + ".abi_" + abi.tag));
      REQUIRE(outputs(*server) == expected);
    }
    // The spec_decode fixture's drafts (it proposes the last token again) were verified with
    // kvcache.paged, which rolls rejected ones back (ABI 1.4).
    REQUIRE(server->status()["engines"][0]["speculation"]["enabled"] == true);
    REQUIRE(server->status()["engines"][0]["speculation"]["drafts"].get<uint64_t>() > 0);
    // From 1.5 the fixture drafts with the engine's own model through draft sessions: greedy, as the
    // target, so its drafts are accepted; every sequence's session is closed when it ends.
    if (abi.minor >= 5) {
      const auto spec = server->status()["engines"][0]["speculation"];
      INFO(spec.dump());
      REQUIRE(spec["accepted_tokens"].get<uint64_t>() > 0);
      REQUIRE(spec["draft_models"].size() == 1);
      REQUIRE(spec["draft_models"][0]["sessions"] == 0);
    }
    // Draft trees with an attention plugin built before row_parent (1.4): each tree's leading chain
    // (spec_decode.tree's is its wrong first token alone) is verified, under causal attention.
    REQUIRE_THAT(server->set_slot("main", "spec_decode", server->register_plugin(fixture_dir() + "/spec_tree/plugin.toml"), {}),
                 Contains("spec_decode.tree"));
    REQUIRE(outputs(*server) == expected);
    // The kvcache's layout, filled by a plugin that knows no `device` member (ABI 1.2), is followed in
    // its memory by a non-zero pointer: a host that read past its struct_size would take the pool for
    // device memory and refuse it.
    toml::table pool;
    pool.insert("block_size", 8);
    pool.insert("n_blocks", 256);
    REQUIRE_THAT(server->set_slot("main", "kvcache", server->register_plugin(matrix_fixture(abi, "kvcache")), pool),
                 Contains("a new engine"));
    REQUIRE(wait_until_no_engine_retires(*server));
    REQUIRE(outputs(*server) == expected);
    auto status = server->status();
    REQUIRE(status["engines"][0]["kvcache"]["id"] == "kvcache.abi_" + abi.tag);
    REQUIRE(status["engines"][0]["attention"]["id"] == "attention.abi_" + abi.tag);
    // Every sequence's blocks went back: free, or (1.5) kept in the prefix cache.
    const auto& kv = status["engines"][0]["kv"];
    REQUIRE(kv["free_blocks"].get<uint32_t>() + kv.value("cached_blocks", 0u) == 256);
    // From 1.5 the fixture's kvcache keeps a prefix cache: the prompts share their first block of 8.
    REQUIRE(status["engines"][0]["prefix_cache"]["enabled"] == (abi.minor >= 5));
    if (abi.minor >= 5) {
      REQUIRE(status["engines"][0]["prefix_cache"]["hits"].get<uint64_t>() > 0);
      REQUIRE(status["engines"][0]["kv"]["cached_blocks"].get<uint32_t>() > 0);
      REQUIRE(status["engines"][0]["kv_accounting"]["disagreements"] == 0);
    }
    // A kvcache without seq_truncate (every minor's fixture: built before 1.4, or at 1.4 without this
    // optional member): its engine keeps the proposer idle, and says why.
    REQUIRE(status["engines"][0]["speculation"]["enabled"] == false);
    REQUIRE(status["engines"][0]["speculation"]["drafts"] == 0);
    REQUIRE_THAT(status["engines"][0]["speculation"]["why_not"].get<std::string>(),
                 Contains("kvcache.abi_" + abi.tag + " has no seq_truncate"));
  }
}

TEST_CASE("abi matrix: from 1.6 a C plugin reads a q8_0 cache and slides a window as the in-tree plugins do", "[abi][server][window]") {
  // The fixture reads q8_0 through the layout's scales and releases blocks with its own C code, no
  // SDK helper: a vendor's plugin as the headers alone describe it.
  size_t ran = 0;
  for (const auto& abi : frozen_abis()) {
    if (abi.minor < 6) continue;
    INFO("ABI " << abi.version);
    // 8 sink positions and a window of 32 on blocks of 8: 80 tokens slide it.
    auto server = make_test_server("kv_dtype = \"q8_0\"\nsliding_window = 32\nattention_sinks = 4\n");
    const auto expected = outputs_alone(*server, 80);
    REQUIRE(server->status()["engines"][0]["sliding_window"]["slides"].get<uint64_t>() > 0);
    REQUIRE_THAT(server->set_slot("main", "attention", server->register_plugin(matrix_fixture(abi, "attention")), {}),
                 Contains("attention.abi_" + abi.tag));
    REQUIRE(outputs_alone(*server, 80) == expected);
    toml::table pool;
    pool.insert("block_size", 8);
    pool.insert("n_blocks", 256);
    REQUIRE_THAT(server->set_slot("main", "kvcache", server->register_plugin(matrix_fixture(abi, "kvcache")), pool),
                 Contains("a new engine"));
    REQUIRE(wait_until_no_engine_retires(*server));
    REQUIRE(outputs_alone(*server, 80) == expected);
    const auto status = server->status()["engines"][0];
    REQUIRE(status["kvcache"]["id"] == "kvcache.abi_" + abi.tag);
    REQUIRE(status["kv"]["dtype"] == "q8_0");
    REQUIRE(status["sliding_window"]["slides"].get<uint64_t>() > 0);
    REQUIRE(status["kv_accounting"]["disagreements"] == 0);
    REQUIRE(status["kv"]["free_blocks"].get<uint32_t>() + status["kv"].value("cached_blocks", 0u) == 256);
    ++ran;
  }
  REQUIRE(ran == (TH_ABI_VERSION_MINOR >= 6 && frozen_abis().size() > 6 ? frozen_abis().size() - 6 : 0));
}

TEST_CASE("abi matrix: frozen minors' moe plugins serve moe.topk's tokens", "[abi][server][moe]") {
  for (const auto& abi : frozen_abis()) {
    INFO("ABI " << abi.version);
    Server server(read_deployment("moe.toml", moe_test_manifest()));
    const auto expected = outputs(server);
    REQUIRE_THAT(server.set_slot("main", "moe", server.register_plugin(matrix_fixture(abi, "moe")), {}),
                 Contains("moe.abi_" + abi.tag));
    REQUIRE(outputs(server) == expected);
  }
}

TEST_CASE("abi matrix: over expert partitions a frozen minor's moe plugin computes concurrently from 1.10 on, on the engine's pool before", "[abi][server][moe]") {
  std::string manifest = moe_test_manifest();
  manifest.replace(manifest.find("moe = { plugin = \"moe.topk\" }"), std::string("moe = { plugin = \"moe.topk\" }").size(),
                   "moe = { plugin = \"moe.eplb\" }\nexpert_partitions = [\"e0\", \"e1\"]\nrebalance_steps = 4\n");
  manifest += "\n[partitions.e0]\nthreads = 1\n[partitions.e1]\nthreads = 1\n";
  for (const auto& abi : frozen_abis()) {
    INFO("ABI " << abi.version);
    Server server(read_deployment("moe.toml", manifest));
    const auto expected = outputs(server);
    auto partition_seconds = [&] {
      const auto s = server.status()["engines"][0]["expert_parallel"]["partition_seconds"].get<std::vector<double>>();
      return s[0] + s[1];
    };
    REQUIRE_THAT(server.set_slot("main", "moe", server.register_plugin(matrix_fixture(abi, "moe")), {}),
                 Contains("moe.abi_" + abi.tag));
    const double before = partition_seconds();
    REQUIRE(outputs(server) == expected);  // its experts() in C, in double: moe.topk's tokens
    // Built before 1.10 its experts() may not take concurrent calls: the engine's own pool computes them.
    if (abi.minor < 10) REQUIRE(partition_seconds() == before);
    else REQUIRE(partition_seconds() > before);
  }
  // Named at start, a moe plugin built before 1.10 is refused for an engine with expert partitions.
  std::string old = manifest;
  old.replace(old.find("plugins_from_anywhere = true"), std::string("plugins_from_anywhere = true").size(),
              "plugins_from_anywhere = true\nplugin_paths = [\"" + fixture_dir() + "/abi_1_9/moe\"]");
  old.replace(old.find("\"moe.eplb\""), std::string("\"moe.eplb\"").size(), "\"moe.abi_1_9\"");
  REQUIRE_THROWS_WITH(Server(read_deployment("moe.toml", old)),
                      Contains("expert_partitions need a moe plugin built against ABI 1.10 or later (moe.abi_1_9 is 1.9)"));
}

TEST_CASE("abi growth: a member past a struct_size is absent, one inside it present", "[abi]") {
  auto route = [](th_instance*, const th_route_request*, th_route_decision*, th_error*) -> th_status { return TH_OK; };
  auto feedback = [](th_instance*, const th_route_feedback*) {};
  th_router_vtable vt{};
  vt.route = route;
  vt.feedback = feedback;
  // A router whose vtable ended before `feedback` (as one built before a minor that appended it would).
  vt.struct_size = uint32_t(offsetof(th_router_vtable, feedback));
  REQUIRE(abi_member(vt, &th_router_vtable::route) == vt.route);
  REQUIRE(abi_member(vt, &th_router_vtable::feedback) == nullptr);
  vt.struct_size = uint32_t(TH_SIZE_THROUGH(th_router_vtable, feedback)) - 1;  // partly covered: still absent
  REQUIRE(abi_member(vt, &th_router_vtable::feedback) == nullptr);
  vt.struct_size = uint32_t(sizeof vt);
  REQUIRE(abi_member(vt, &th_router_vtable::feedback) == vt.feedback);

  // Data members of a plugin-filled struct: absent ones read as the caller's fallback.
  th_kv_layout layout{};
  layout.device = TH_DEVICE_CUDA;
  layout.struct_size = uint32_t(offsetof(th_kv_layout, device));  // an ABI 1.1 layout
  REQUIRE(abi_member(layout, &th_kv_layout::device, th_device_kind(TH_DEVICE_CPU)) == TH_DEVICE_CPU);
  REQUIRE_FALSE(TH_HAS_MEMBER(&layout, th_kv_layout, device));
  layout.struct_size = uint32_t(sizeof layout);
  REQUIRE(abi_member(layout, &th_kv_layout::device, th_device_kind(TH_DEVICE_CPU)) == TH_DEVICE_CUDA);
  REQUIRE(TH_HAS_MEMBER(&layout, th_kv_layout, device));
  REQUIRE(abi_size_through(&th_kv_layout::device_index) == TH_SIZE_THROUGH(th_kv_layout, device_index));
}

TEST_CASE("abi growth: each kind's vtable size per minor never shrinks and ends at the host's own", "[abi]") {
  for (const std::string& name : kind_names()) {
    const th_kind kind = *kind_from_name(name);
    INFO(name);
    for (uint16_t m = 1; m <= TH_ABI_VERSION_MINOR; ++m) REQUIRE(vtable_size(kind, m) >= vtable_size(kind, m - 1));
    REQUIRE(vtable_size(kind, TH_ABI_VERSION_MINOR) > sizeof(th_vtable_head));
    // A minor newer than the host's is read as the host's (the loader refuses it before that matters).
    REQUIRE(vtable_size(kind, TH_ABI_VERSION_MINOR + 1) == vtable_size(kind, TH_ABI_VERSION_MINOR));
  }
}

}  // namespace plugin_abi_matrix_tests
