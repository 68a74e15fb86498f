// kv_connector.disk end to end: a server writes its prompts' blocks to a folder; a server restarted on
// that folder loads them instead of computing them and answers with exactly the tokens of a server
// without the tier (f16 and q8_0 KV, both attention plugins); a damaged or truncated block file is
// refused by name and its positions computed; another model on the same folder finds nothing; a
// scheduler built against ABI 1.8 never sees a sequence whose blocks are loading. Block accounting is
// exact on every path.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "files.hpp"
#include "test_server.hpp"

namespace kv_connector_disk_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kBlock = 8, kBlocks = 128;
// Each prompt is 67 tokens (bytes): 8 whole blocks before its last token, which are saved and loaded.
constexpr uint64_t kPerPrompt = 8;

// Prompts of 7 whole blocks and a bit (the last token is always computed: 7 blocks can load).
std::vector<std::string> long_prompts() {
  std::vector<std::string> p;
  for (int i = 0; i < 4; ++i) p.push_back("story " + std::to_string(i) + ": once upon a time a small robot walked to the sea and sang.");
  return p;
}

std::string manifest(const std::string& kv_dtype, const std::string& attention, const std::string& folder, int seed = 7,
                     bool connector = true, const std::string& connector_extra = "") {
  std::string m = R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
plugins_from_anywhere = true

[models.tiny]
seed = )" + std::to_string(seed) + R"(
dim = 32
n_layers = 2
n_heads = 4
n_kv_heads = 2
context_len = 256

[engines.main]
model = "tiny"
kv_dtype = ")" + kv_dtype + R"("
max_step_tokens = 64
max_step_seqs = 16
attention = { plugin = ")" + attention + R"(" }
kvcache = { plugin = "kvcache.prefix", config = { block_size = )" + std::to_string(kBlock) + ", n_blocks = " +
                  std::to_string(kBlocks) + R"( } }
scheduler = { plugin = "scheduler.fifo", config = { max_prefill_chunk = 16 } }
)";
  if (connector)
    m += "[[engines.main.kv_connector]]\nplugin = \"kv_connector.disk\"\nconfig = { folder = \"" + folder + "\"" + connector_extra + " }\n";
  return m;
}

std::vector<std::vector<int32_t>> run_all(Server& server, uint32_t max_tokens = 6) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : long_prompts()) {
    auto r = server.gateway().generate(request_for(server, p, max_tokens));
    REQUIRE(r.error == "");
    REQUIRE(r.finish_reason == "length");
    out.push_back(r.tokens);
  }
  return out;
}

nlohmann::json tier(Server& server) { return server.status()["engines"][0]["kv_connectors"]["layers"][0]; }

// Waits until the tier has stored `blocks` blocks (saves are written on the connector's thread).
bool wait_stored(Server& server, uint64_t blocks) {
  for (int i = 0; i < 500; ++i) {
    if (tier(server)["stored_blocks"].get<uint64_t>() >= blocks) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// Every block back in the pool (free or cached), the engine's count and the plugin's agreeing.
void require_exact_accounting(Server& server) {
  const auto e = server.status()["engines"][0];
  INFO(e.dump());
  REQUIRE(e["kv"]["free_blocks"].get<uint32_t>() + e["kv"].value("cached_blocks", 0u) == kBlocks);
  REQUIRE(e["kv_accounting"]["disagreements"] == 0);
  REQUIRE(e["kv_connectors"]["loading"] == 0);
}

std::vector<fs::path> block_files(const fs::path& folder) {
  std::vector<fs::path> files;
  for (const auto& f : fs::recursive_directory_iterator(folder))
    if (f.path().extension() == ".kvb") files.push_back(f.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("kv_connector.disk: a restarted server loads its prompts' blocks from the folder and answers as without the tier",
          "[server][kv_connector]") {
  const std::string kv_dtype = GENERATE(std::string("f16"), std::string("q8_0"));
  const std::string attention = GENERATE(std::string("attention.reference"), std::string("attention.cpu_flash"));
  INFO(kv_dtype << " " << attention);
  TempDir folder;
  std::vector<std::vector<int32_t>> expected;
  {
    Server plain(read_deployment("plain.toml", manifest(kv_dtype, attention, "", 7, false)));
    expected = run_all(plain);
  }
  const uint64_t per_prompt = kPerPrompt;
  REQUIRE(long_prompts()[0].size() == 67);
  {
    Server first(read_deployment("disk.toml", manifest(kv_dtype, attention, folder.path.string())));
    REQUIRE(run_all(first) == expected);  // computed, saved on the way
    REQUIRE(wait_stored(first, per_prompt * long_prompts().size()));
    REQUIRE(tier(first)["loaded_blocks"] == 0);
    require_exact_accounting(first);
  }
  REQUIRE(block_files(folder.path).size() == per_prompt * long_prompts().size());

  Server second(read_deployment("disk.toml", manifest(kv_dtype, attention, folder.path.string())));
  REQUIRE(tier(second)["stored_blocks"] == per_prompt * long_prompts().size());  // found at start
  REQUIRE(run_all(second) == expected);
  const auto t = tier(second);
  INFO(t.dump());
  REQUIRE(t["hits"] == long_prompts().size());
  REQUIRE(t["loaded_blocks"] == per_prompt * long_prompts().size());
  REQUIRE(t["load_failures"] == 0);
  REQUIRE(metric_sum(second, "tokenhost_kv_connector_loaded_blocks_total", "kv_connector.disk", "connector") ==
          double(per_prompt * long_prompts().size()));
  require_exact_accounting(second);
  // Asked again, the prompts hit the memory cache (the loaded blocks were published into it).
  REQUIRE(run_all(second) == expected);
  REQUIRE(tier(second)["hits"] == long_prompts().size());
  require_exact_accounting(second);
}

TEST_CASE("kv_connector.disk: a damaged or truncated block file is refused by name and its positions computed", "[server][kv_connector]") {
  TempDir folder;
  std::vector<std::vector<int32_t>> expected;
  {
    Server first(read_deployment("disk.toml", manifest("f16", "attention.reference", folder.path.string())));
    expected = run_all(first);
    REQUIRE(wait_stored(first, kPerPrompt * long_prompts().size()));
  }
  const auto files = block_files(folder.path);
  REQUIRE(files.size() == kPerPrompt * long_prompts().size());
  const fs::path damaged = files[files.size() / 2];
  const uintmax_t whole = fs::file_size(damaged);
  std::string failure;
  SECTION("a byte of the block flipped") {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.seekg(100);
    f.read(&c, 1);
    c = char(c ^ 0x5a);
    f.seekp(100);
    f.write(&c, 1);
    failure = "fails its checksum";
  }
  SECTION("the file cut short") {
    fs::resize_file(damaged, whole / 2);
    failure = "is truncated";
  }
  {
    Server second(read_deployment("disk.toml", manifest("f16", "attention.reference", folder.path.string())));
    REQUIRE(run_all(second) == expected);  // never served: computed instead
    const auto t = tier(second);
    INFO(t.dump());
    REQUIRE(t["refused_blocks"] == 1);
    REQUIRE(t["load_failures"] == 1);
    REQUIRE(t["hits"] == long_prompts().size());
    REQUIRE(t["loaded_blocks"].get<uint64_t>() < kPerPrompt * long_prompts().size());
    const std::string why = t["last_failure"];
    REQUIRE_THAT(why, Catch::Matchers::Contains(damaged.string()) && Catch::Matchers::Contains(failure));
    require_exact_accounting(second);
    // The positions computed instead were saved again: the folder is whole once more.
    REQUIRE(wait_stored(second, kPerPrompt * long_prompts().size()));
  }
  REQUIRE(fs::file_size(damaged) == whole);
  Server third(read_deployment("disk.toml", manifest("f16", "attention.reference", folder.path.string())));
  REQUIRE(run_all(third) == expected);
  REQUIRE(tier(third)["loaded_blocks"] == kPerPrompt * long_prompts().size());
  REQUIRE(tier(third)["load_failures"] == 0);
}

TEST_CASE("kv_connector.disk: another model on the same folder finds nothing of the first", "[server][kv_connector]") {
  TempDir folder;
  {
    Server first(read_deployment("disk.toml", manifest("f16", "attention.reference", folder.path.string())));
    run_all(first);
    REQUIRE(wait_stored(first, kPerPrompt * long_prompts().size()));
  }
  std::vector<std::vector<int32_t>> expected;
  {
    Server plain(read_deployment("plain.toml", manifest("f16", "attention.reference", "", 8, false)));
    expected = run_all(plain);
  }
  Server other(read_deployment("disk.toml", manifest("f16", "attention.reference", folder.path.string(), 8)));
  REQUIRE(run_all(other) == expected);
  REQUIRE(tier(other)["hits"] == 0);
  REQUIRE(tier(other)["loaded_blocks"] == 0);
  // Nor does another client of the same model (another cache_salt: another namespace).
  {
    Server salted(read_deployment("disk.toml", manifest("f16", "attention.reference", folder.path.string())));
    for (const auto& p : long_prompts()) {
      GenerateRequest r = request_for(salted, p, 6);
      r.cache_salt = "another client";
      REQUIRE(salted.gateway().generate(r).finish_reason == "length");
    }
    REQUIRE(tier(salted)["hits"] == 0);
  }
  // Nor does a q8_0 cache of the same model: the KV shape is part of every key.
  Server q8(read_deployment("disk.toml", manifest("q8_0", "attention.reference", folder.path.string())));
  run_all(q8);
  REQUIRE(tier(q8)["hits"] == 0);
}

TEST_CASE("kv_connector.disk: a scheduler built against ABI 1.8 never sees a loading sequence", "[server][kv_connector][abi]") {
  TempDir folder;
  std::vector<std::vector<int32_t>> expected;
  {
    Server first(read_deployment("disk.toml", manifest("f16", "attention.reference", folder.path.string())));
    expected = run_all(first);
    REQUIRE(wait_stored(first, kPerPrompt * long_prompts().size()));
  }
  Server second(read_deployment("disk.toml", manifest("f16", "attention.reference", folder.path.string())));
  const std::string fixture = std::string(TOKENHOST_FIXTURE_DIR) + "/abi_1_8/scheduler/plugin.toml";
  REQUIRE_THAT(second.set_slot("main", "scheduler", second.register_plugin(fixture), {}), Catch::Matchers::Contains("scheduler.abi_1_8"));
  // Its decisions would run a loading sequence if it saw one (it runs every sequence it is shown that
  // fits): the host would refuse them and stop the engine.
  REQUIRE(run_all(second) == expected);
  REQUIRE(tier(second)["loaded_blocks"] == kPerPrompt * long_prompts().size());
  require_exact_accounting(second);
}

}  // namespace kv_connector_disk_tests

namespace kv_connector_disk_tests {

TEST_CASE("kv_connector: the admin API inserts, replaces and removes layers of a running engine's stack", "[server][kv_connector][admin]") {
  using Op = SlotSwap::LayerOp;
  TempDir a, b, c;
  auto folder_config = [](const TempDir& f) {
    toml::table t;
    t.insert("folder", f.path.string());
    return t;
  };
  Server server(read_deployment("disk.toml", manifest("f16", "attention.reference", a.path.string())));
  run_all(server);
  REQUIRE(wait_stored(server, kPerPrompt * long_prompts().size()));

  REQUIRE_THAT(server.change_layer("main", "kv_connector", Op::insert, Server::kAppendLayer, "kv_connector.disk", folder_config(b)),
               Catch::Matchers::Contains("layer 1 inserted"));
  auto layers = [&] { return server.status()["engines"][0]["kv_connectors"]["layers"]; };
  REQUIRE(layers().size() == 2);
  // New prompts are computed and saved to both tiers.
  std::vector<std::string> others;
  for (const auto& p : long_prompts()) others.push_back("Z" + p.substr(1));
  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : others) expected.push_back(server.gateway().generate(request_for(server, p, 6)).tokens);
  for (int i = 0; i < 500 && layers()[1]["stored_blocks"].get<uint64_t>() < kPerPrompt * others.size(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(layers()[1]["stored_blocks"] == kPerPrompt * others.size());

  // Layer 0 becomes an empty tier: the prompts, gone from memory, load from layer 1.
  REQUIRE_THAT(server.change_layer("main", "kv_connector", Op::replace, 0, "kv_connector.disk", folder_config(c)),
               Catch::Matchers::Contains("layer 0: kv_connector.disk"));
  server.flush_prefix_cache("main");
  for (size_t i = 0; i < others.size(); ++i) REQUIRE(server.gateway().generate(request_for(server, others[i], 6)).tokens == expected[i]);
  INFO(layers().dump());
  REQUIRE(layers()[0]["hits"] == 0);
  REQUIRE(layers()[1]["hits"] == others.size());
  REQUIRE(layers()[1]["loaded_blocks"] == kPerPrompt * others.size());
  require_exact_accounting(server);

  REQUIRE_THAT(server.change_layer("main", "kv_connector", Op::remove, 0, "", {}), Catch::Matchers::Contains("layer 0 removed"));
  REQUIRE(layers().size() == 1);
  REQUIRE(layers()[0]["stored_blocks"] == kPerPrompt * others.size());  // b's tier, now the first
  REQUIRE_THAT(server.export_manifest(), Catch::Matchers::Contains("[[engines.main.kv_connector]]") &&
                                             Catch::Matchers::Contains(b.path.string()) && !Catch::Matchers::Contains(a.path.string()));
  // Refusals name what was wrong and change nothing.
  auto refused = [&](auto&& change, const std::string& words) {
    try {
      change();
      FAIL("the change was not refused");
    } catch (const AdminError& e) {
      REQUIRE_THAT(std::string(e.what()), Catch::Matchers::Contains(words));
    }
  };
  refused([&] { server.change_layer("main", "kv_connector", Op::remove, 3, "", {}); }, "position 3 is out of range (0 to 0)");
  refused([&] { server.change_layer("main", "kv_connector", Op::insert, 0, "kv_connector.nope", {}); }, "kv_connector.nope");
  refused([&] { server.change_layer("main", "scheduler", Op::remove, 0, "", {}); }, "no stacking slot 'scheduler'");
  refused([&] { server.set_slot("main", "kv_connector", "kv_connector.disk", {}); }, "stacks layers");
  REQUIRE(layers().size() == 1);
  for (size_t i = 0; i < others.size(); ++i) REQUIRE(server.gateway().generate(request_for(server, others[i], 6)).tokens == expected[i]);
  require_exact_accounting(server);
}

}  // namespace kv_connector_disk_tests

namespace kv_connector_disk_tests {

TEST_CASE("kv_connector: a connector in C inserted into a running engine serves evicted prefixes from memory", "[server][kv_connector]") {
  const std::string kv_dtype = GENERATE(std::string("f32"), std::string("q8_0"));
  INFO(kv_dtype);
  Server server(read_deployment("plain.toml", manifest(kv_dtype, "attention.reference", "", 7, false)));
  const auto expected = run_all(server);
  const std::string fixture = std::string(TOKENHOST_FIXTURE_DIR) + "/kv_connector/plugin.toml";
  REQUIRE_THAT(server.change_layer("main", "kv_connector", SlotSwap::LayerOp::insert, Server::kAppendLayer, server.register_plugin(fixture), {}),
               Catch::Matchers::Contains("layer 0 inserted: kv_connector.fixture"));
  server.flush_prefix_cache("main");
  REQUIRE(run_all(server) == expected);  // computed again, saved to the C tier
  server.flush_prefix_cache("main");
  REQUIRE(run_all(server) == expected);  // loaded from it
  const auto t = tier(server);
  INFO(t.dump());
  REQUIRE(t["id"] == "kv_connector.fixture");
  REQUIRE(t["hits"] == long_prompts().size());
  REQUIRE(t["loaded_blocks"] == kPerPrompt * long_prompts().size());
  REQUIRE(t["saved_blocks"] == kPerPrompt * long_prompts().size());
  require_exact_accounting(server);
}

}  // namespace kv_connector_disk_tests

namespace kv_connector_disk_tests {

TEST_CASE("kv_connector.disk: two servers on one folder find each other's blocks", "[server][kv_connector]") {
  TempDir folder;
  Server reader(read_deployment("disk.toml", manifest("f16", "attention.reference", folder.path.string())));  // its scan finds nothing
  std::vector<std::vector<int32_t>> expected;
  {
    Server writer(read_deployment("disk.toml", manifest("f16", "attention.reference", folder.path.string())));
    expected = run_all(writer);
    REQUIRE(wait_stored(writer, kPerPrompt * long_prompts().size()));
  }
  REQUIRE(tier(reader)["stored_blocks"] == 0);
  REQUIRE(run_all(reader) == expected);
  const auto t = tier(reader);
  INFO(t.dump());
  REQUIRE(t["hits"] == long_prompts().size());
  REQUIRE(t["loaded_blocks"] == kPerPrompt * long_prompts().size());
  require_exact_accounting(reader);
}

TEST_CASE("kv_connector: a request cancelled while its blocks load gives every block back once the load completes",
          "[server][kv_connector]") {
  Server server(read_deployment("plain.toml", manifest("f16", "attention.reference", "", 7, false)));
  const std::string fixture = std::string(TOKENHOST_FIXTURE_DIR) + "/kv_connector_slow/plugin.toml";
  server.change_layer("main", "kv_connector", SlotSwap::LayerOp::insert, Server::kAppendLayer, server.register_plugin(fixture), {});
  server.flush_prefix_cache("main");
  const auto expected = run_all(server);  // computed, saved to the tier
  server.flush_prefix_cache("main");
  auto loading = [&] { return server.status()["engines"][0]["kv_connectors"]["loading"].get<uint64_t>(); };
  GenerateRequest r = request_for(server, long_prompts()[0], 6);
  auto stream = std::make_shared<TokenStream>();
  r.stream = stream;
  auto answer = std::async(std::launch::async, [&server, r] { return server.gateway().generate(r); });
  for (int i = 0; i < 2000 && loading() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(loading() == 1);  // its blocks are on their way (25 polls, about 50 ms)
  stream->cancel();
  REQUIRE(answer.get().finish_reason == "cancelled");
  for (int i = 0; i < 2000 && loading() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  require_exact_accounting(server);
  // The next ask of that prompt loads it and answers as computed.
  REQUIRE(server.gateway().generate(request_for(server, long_prompts()[0], 6)).tokens == expected[0]);
  REQUIRE(tier(server)["loaded_blocks"] == kPerPrompt);
  require_exact_accounting(server);
}

}  // namespace kv_connector_disk_tests

namespace kv_connector_disk_tests {

TEST_CASE("kv_connector.disk: the folder stays within max_bytes, the least recently used blocks going first", "[server][kv_connector]") {
  TempDir folder;
  constexpr uint64_t kFile = 64 + 1024;  // the header and a block of the tiny model in f16
  const uint64_t cap = 10 * kFile + 100;
  Server server(read_deployment("disk.toml", manifest("f16", "attention.reference", folder.path.string(), 7, true,
                                                      ", max_bytes = " + std::to_string(cap))));
  const auto expected = run_all(server);
  for (int i = 0; i < 500 && tier(server)["evicted_blocks"].get<uint64_t>() < kPerPrompt * long_prompts().size() - 10; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto t = tier(server);
  INFO(t.dump());
  REQUIRE(t["stored_blocks"] == 10);
  REQUIRE(t["stored_bytes"].get<uint64_t>() <= cap);
  REQUIRE(t["evicted_blocks"] == kPerPrompt * long_prompts().size() - 10);
  uint64_t on_disk = 0;
  for (const auto& f : block_files(folder.path)) on_disk += fs::file_size(f);
  REQUIRE(on_disk <= cap);
  // The newest blocks are the last prompt's: flushed from memory, it loads what the tier kept.
  server.flush_prefix_cache("main");
  REQUIRE(server.gateway().generate(request_for(server, long_prompts().back(), 6)).tokens == expected.back());
  REQUIRE(tier(server)["loaded_blocks"] == kPerPrompt);
  require_exact_accounting(server);
}

TEST_CASE("kv_connector.disk: a folder it cannot write is an error in the log, not a failed request", "[server][kv_connector]") {
  TempDir folder;
  Server server(read_deployment("disk.toml", manifest("f16", "attention.reference", folder.path.string())));
  // The folder gives way to a file: no block file can be made under it.
  fs::remove_all(folder.path);
  std::ofstream(folder.path) << "not a folder";
  std::vector<std::vector<int32_t>> expected;
  {
    Server plain(read_deployment("plain.toml", manifest("f16", "attention.reference", "", 7, false)));
    expected = run_all(plain);
  }
  REQUIRE(run_all(server) == expected);
  for (int i = 0; i < 500 && tier(server)["save_failures"].get<uint64_t>() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto t = tier(server);
  INFO(t.dump());
  REQUIRE(t["save_failures"].get<uint64_t>() > 0);
  REQUIRE(t["stored_blocks"] == 0);
  require_exact_accounting(server);
  fs::remove(folder.path);
}

TEST_CASE("kv_connector: layers replaced under load lose no request and change no answer", "[server][kv_connector][admin]") {
  TempDir a, b;
  Server server(read_deployment("disk.toml", manifest("f16", "attention.reference", a.path.string())));
  std::vector<std::vector<int32_t>> expected;
  {
    Server plain(read_deployment("plain.toml", manifest("f16", "attention.reference", "", 7, false)));
    expected = run_all(plain);
  }
  std::vector<std::future<GenerateResult>> answers;
  for (int round = 0; round < 4; ++round)
    for (const auto& p : long_prompts())
      answers.push_back(std::async(std::launch::async, [&server, p] { return server.gateway().generate(request_for(server, p, 6)); }));
  // Meanwhile the tier is replaced, back and forth, and the memory cache flushed (loads follow).
  for (int i = 0; i < 6; ++i) {
    toml::table config;
    config.insert("folder", (i % 2 ? a : b).path.string());
    for (int tries = 0;; ++tries) {  // a layer with loads out is refused until they are done
      try {
        server.change_layer("main", "kv_connector", SlotSwap::LayerOp::replace, 0, "kv_connector.disk", config);
        break;
      } catch (const AdminError& e) {
        REQUIRE_THAT(std::string(e.what()), Catch::Matchers::Contains("load(s) out"));
        REQUIRE(tries < 1000);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    server.flush_prefix_cache("main");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (size_t i = 0; i < answers.size(); ++i) {
    auto r = answers[i].get();
    INFO("request " << i << ": " << r.error);
    REQUIRE(r.finish_reason == "length");
    REQUIRE(r.tokens == expected[i % expected.size()]);
  }
  for (int i = 0; i < 500 && server.status()["engines"][0]["kv_connectors"]["loading"].get<uint64_t>() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  require_exact_accounting(server);
}

}  // namespace kv_connector_disk_tests
