// Prefill/decode disaggregation in one process (stories260K): a prefill engine computes the prompt and the first token
// and stores the prompt's KV blocks in a tier both engines share (kv_connector.disk on one folder) or sends
// them to the decode engine (kv_connector.ucx over UCX, kv_connector.actor over the host's messages); the
// decode engine loads them and continues. Greedy answers equal one engine's (f16 and q8_0 KV, both
// attention plugins); the path names both engines; both pools account for every block afterwards;
// short prompts and one-token answers stay on one engine.
#include <catch2/catch.hpp>

#include <filesystem>
#include <future>
#include <thread>

#include "files.hpp"
#include "raw_client.hpp"
#include "test_server.hpp"

namespace disaggregation_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kBlocks = 128;
constexpr uint64_t kPerPrompt = 8;  // 67-token prompts: 8 whole blocks of 8 before the last token

std::vector<std::string> prompts() {
  std::vector<std::string> p;
  for (int i = 0; i < 4; ++i) p.push_back("story " + std::to_string(i) + ": once upon a time a small robot walked to the sea and sang.");
  return p;
}

// The [[engines.NAME.kv_connector]] table's body of a disk tier on folder, empty for none.
std::string disk(const std::string& folder) {
  return folder.empty() ? "" : "plugin = \"kv_connector.disk\"\nconfig = { folder = \"" + folder + "\" }\n";
}

// The same for kv_connector.actor with the given settings.
std::string actor(const std::string& settings) {
  return "plugin = \"kv_connector.actor\"\nconfig = { " + settings + " }\n";
}

// The same for kv_connector.ucx with the given settings, over TCP and shared memory.
std::string ucx(const std::string& settings) {
  return "plugin = \"kv_connector.ucx\"\nconfig = { tls = \"tcp,sm\", " + settings + " }\n";
}

std::string engine(const std::string& name, const std::string& role, const std::string& kv_dtype, const std::string& attention,
                   const std::string& connector) {
  std::string e = "\n[engines." + name + "]\nmodel = \"tiny\"\nkv_dtype = \"" + kv_dtype + "\"\n" +
                  (role.empty() ? "" : "role = \"" + role + "\"\n") + R"(max_step_tokens = 64
max_step_seqs = 16
attention = { plugin = ")" + attention + R"(" }
kvcache = { plugin = "kvcache.prefix", config = { block_size = 8, n_blocks = )" + std::to_string(kBlocks) + R"( } }
scheduler = { plugin = "scheduler.fifo", config = { max_prefill_chunk = 16 } }
)";
  if (!connector.empty()) e += "[[engines." + name + ".kv_connector]]\n" + connector;
  return e;
}

// stories260K, the real model compiled into the binary, under the name the engines use.
std::string header() {
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
plugins_from_anywhere = true

[models.tiny]
source = "builtin"
name = "stories260K"
)";
}

nlohmann::json engine_status(Server& server, const std::string& name) {
  const nlohmann::json status = server.status();  // held: a range over a temporary's member dangles
  for (const auto& e : status["engines"])
    if (e["name"] == name) return e;
  FAIL("no engine " << name << " in " << status["engines"].dump());
  return {};
}

void require_exact_accounting(Server& server, const std::string& name) {
  const auto e = engine_status(server, name);
  INFO(name << ": " << e.dump());
  REQUIRE(e["kv"]["free_blocks"].get<uint32_t>() + e["kv"].value("cached_blocks", 0u) == kBlocks);
  REQUIRE(e["kv_accounting"]["disagreements"] == 0);
  REQUIRE(e["kv_connectors"]["loading"] == 0);
}

// What one engine of the same settings answers to each of prompts(), greedy, 6 tokens: what the
// disaggregated engines must answer.
std::vector<std::vector<int32_t>> one_engine_answers(const std::string& kv_dtype, const std::string& attention) {
  Server one(read_deployment("one.toml", header() + engine("main", "", kv_dtype, attention, "")));
  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : prompts()) expected.push_back(one.gateway().generate(request_for(one, p, 6)).tokens);
  return expected;
}

}  // namespace

TEST_CASE("disaggregation: a prefill and a decode engine answer as one engine, the decode engine loading the prompt's blocks",
          "[server][disaggregation][kv_connector]") {
  // The blocks go through a folder both engines share, over UCX (shared memory and TCP) from the
  // prefill engine to the decode engine's listener, or as actor messages from engine to engine.
  const std::string transport = GENERATE(std::string("disk"), std::string("ucx"), std::string("actor"));
  const std::string kv_dtype = GENERATE(std::string("f16"), std::string("q8_0"));
  const std::string attention = GENERATE(std::string("attention.reference"), std::string("attention.cpu_flash"));
  INFO(transport << " " << kv_dtype << " " << attention);
  const std::vector<std::vector<int32_t>> expected = one_engine_answers(kv_dtype, attention);
  TempDir folder;
  const std::string address = "127.0.0.1:" + std::to_string(free_tcp_port());
  const std::string from = transport == "disk"  ? disk(folder.path.string())
                           : transport == "ucx" ? ucx("peers = \"" + address + "\"")
                                                : actor("peers = \"decode\"");
  const std::string to = transport == "disk"  ? disk(folder.path.string())
                         : transport == "ucx" ? ucx("listen = \"" + address + "\"")
                                              : actor("");
  Server server(read_deployment("pd.toml", header() + engine("prefill", "prefill", kv_dtype, attention, from) +
                                                 engine("decode", "decode", kv_dtype, attention, to) +
                                                 "\n[router]\nplugin = \"router.disaggregated\"\nconfig = { min_prompt_tokens = 16 }\n"));
  REQUIRE(engine_status(server, "prefill")["role"] == "prefill");
  for (size_t i = 0; i < prompts().size(); ++i) {
    auto r = server.gateway().generate(request_for(server, prompts()[i], 6));
    INFO("prompt " << i << ": " << r.error);
    REQUIRE(r.finish_reason == "length");
    REQUIRE(r.tokens == expected[i]);
    REQUIRE(r.path.size() == 2);
    REQUIRE(r.path[0].engine == "prefill");
    REQUIRE(r.path[0].outcome == "prefilled");
    REQUIRE(r.path[0].tokens == 1);
    REQUIRE(r.path[1].engine == "decode");
    REQUIRE(r.path[1].outcome == "answered");
    REQUIRE(r.path[1].tokens == 5);
  }
  const auto prefill = engine_status(server, "prefill")["kv_connectors"]["layers"][0];
  const auto decode = engine_status(server, "decode")["kv_connectors"]["layers"][0];
  INFO(prefill.dump() << "\n" << decode.dump());
  REQUIRE(prefill["saved_blocks"] == kPerPrompt * prompts().size());  // stored before each first token went out
  REQUIRE(decode["hits"] == prompts().size());
  REQUIRE(decode["loaded_blocks"] == kPerPrompt * prompts().size());
  REQUIRE(decode["load_failures"] == 0);
  require_exact_accounting(server, "prefill");
  require_exact_accounting(server, "decode");

  // A short prompt stays on the decode engine; a one-token answer ends on the prefill engine.
  auto short_one = server.gateway().generate(request_for(server, "hello there", 4));
  REQUIRE(short_one.path.size() == 1);
  REQUIRE(short_one.path[0].engine == "decode");
  auto one_token = server.gateway().generate(request_for(server, prompts()[0] + " and then", 1));
  REQUIRE(one_token.tokens.size() == 1);
  REQUIRE(one_token.path.size() == 1);
  REQUIRE(one_token.path[0].engine == "prefill");
  require_exact_accounting(server, "prefill");
  require_exact_accounting(server, "decode");
}

}  // namespace disaggregation_tests

namespace disaggregation_tests {

TEST_CASE("disaggregation: a failed prefill engine leaves the request to the decode engine, and cancelled requests free both sides",
          "[server][disaggregation][kv_connector]") {
  const std::vector<std::vector<int32_t>> expected = one_engine_answers("f16", "attention.reference");
  TempDir folder;
  const std::string router = "\n[router]\nplugin = \"router.disaggregated\"\nconfig = { min_prompt_tokens = 16 }\n";
  SECTION("the prefill engine's attention throws at its first step") {
    std::string prefill = engine("prefill", "prefill", "f16", "attention.reference", disk(folder.path.string()));
    prefill.replace(prefill.find("attention = { plugin = \"attention.reference\" }"), std::string("attention = { plugin = \"attention.reference\" }").size(),
                    "attention = { plugin = \"attention.faulty\", config = { fault_on_call = 1 } }");
    std::string manifest = header() + prefill + engine("decode", "decode", "f16", "attention.reference", disk(folder.path.string())) + router;
    manifest.insert(manifest.find("plugins_from_anywhere = true\n") + 29, "plugin_paths = [\"" + fixture_dir() + "/attention_faulty\"]\n");
    Server server(read_deployment("pd.toml", manifest));
    auto r = server.gateway().generate(request_for(server, prompts()[0], 6));
    INFO(r.error);
    REQUIRE(r.finish_reason == "length");
    REQUIRE(r.tokens == expected[0]);  // computed whole on the decode engine
    REQUIRE(r.path.size() == 2);
    REQUIRE(r.path[0].engine == "prefill");
    REQUIRE(r.path[0].outcome == "failed");
    REQUIRE(r.path[1].engine == "decode");
    REQUIRE(r.path[1].outcome == "answered");
    require_exact_accounting(server, "decode");
  }
  SECTION("cancelled before the first token, and while the decode engine streams") {
    Server server(read_deployment("pd.toml", header() + engine("prefill", "prefill", "f16", "attention.reference", disk(folder.path.string())) +
                                                   engine("decode", "decode", "f16", "attention.reference", disk(folder.path.string())) + router));
    for (int at_token : {0, 3}) {
      INFO("cancelled after " << at_token << " tokens");
      GenerateRequest r = request_for(server, prompts()[1], 200);
      auto stream = std::make_shared<TokenStream>();
      r.stream = stream;
      auto answer = std::async(std::launch::async, [&server, r] { return server.gateway().generate(r); });
      for (int i = 0; i < 5000 && stream->wait(0, std::chrono::milliseconds(0)).tokens.size() < size_t(at_token); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      stream->cancel();
      const auto result = answer.get();
      REQUIRE(result.finish_reason == "cancelled");
      REQUIRE(result.tokens.size() < 200);
    }
    // Both pools give every block back once the engines are idle.
    for (int i = 0; i < 500 && (engine_status(server, "prefill")["sequences"] != 0 || engine_status(server, "decode")["sequences"] != 0); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    require_exact_accounting(server, "prefill");
    require_exact_accounting(server, "decode");
    // And serve the next request as before.
    REQUIRE(server.gateway().generate(request_for(server, prompts()[2], 6)).tokens == expected[2]);
  }
}

}  // namespace disaggregation_tests

namespace disaggregation_tests {

TEST_CASE("disaggregation: an A/B experiment compares colocated against disaggregated serving on live traffic",
          "[server][disaggregation][experiments]") {
  const std::vector<std::vector<int32_t>> expected = one_engine_answers("f16", "attention.reference");
  TempDir folder;
  Server server(read_deployment("ab.toml", header() + engine("colocated", "both", "f16", "attention.reference", "") +
                                                engine("prefill", "prefill", "f16", "attention.reference", disk(folder.path.string())) +
                                                engine("decode", "decode", "f16", "attention.reference", disk(folder.path.string())) + R"(
[experiments.pd]
model = "tiny"
sticky_key = "none"
arms = [
  { name = "colocated", router = "router.disaggregated", config = { split = false, min_prompt_tokens = 16 }, percent = 50 },
  { name = "disaggregated", router = "router.disaggregated", config = { min_prompt_tokens = 16 }, percent = 50 },
]
)"));
  int split = 0, whole = 0;
  for (int i = 0; i < 16; ++i) {
    const size_t k = size_t(i) % prompts().size();
    auto r = server.gateway().generate(request_for(server, prompts()[k], 6));
    INFO("request " << i << ": " << r.error);
    REQUIRE(r.tokens == expected[k]);
    if (r.path.size() == 2) {  // the disaggregated arm: prefill, then decode
      REQUIRE(r.path[0].engine == "prefill");
      REQUIRE(r.path[1].engine == "decode");
      ++split;
    } else {  // the colocated arm: the engine that does both
      REQUIRE(r.path.size() == 1);
      REQUIRE(r.path[0].engine == "colocated");
      ++whole;
    }
  }
  const auto arms = server.experiment_report("pd")["arms"];
  REQUIRE(arms.size() == 2);
  REQUIRE(arms[0]["requests"].get<int>() == whole);
  REQUIRE(arms[1]["requests"].get<int>() == split);
  REQUIRE(whole > 0);
  REQUIRE(split > 0);
  REQUIRE(arms[1]["ttft_s"]["n"].get<int>() == split);
  require_exact_accounting(server, "prefill");
  require_exact_accounting(server, "decode");
}

}  // namespace disaggregation_tests

namespace disaggregation_tests {

TEST_CASE("disaggregation: a decode engine that fails before its first token leaves the rest to the prefill engine",
          "[server][disaggregation][kv_connector]") {
  const std::vector<std::vector<int32_t>> expected = one_engine_answers("f16", "attention.reference");
  TempDir folder;
  std::string decode = engine("decode", "decode", "f16", "attention.reference", disk(folder.path.string()));
  // Its attention throws at its first step.
  decode.replace(decode.find("attention = { plugin = \"attention.reference\" }"), std::string("attention = { plugin = \"attention.reference\" }").size(),
                 "attention = { plugin = \"attention.faulty\", config = { fault_on_call = 1 } }");
  std::string manifest = header() + engine("prefill", "prefill", "f16", "attention.reference", disk(folder.path.string())) + decode +
                         "\n[router]\nplugin = \"router.disaggregated\"\nconfig = { min_prompt_tokens = 16 }\n";
  manifest.insert(manifest.find("plugins_from_anywhere = true\n") + 29, "plugin_paths = [\"" + fixture_dir() + "/attention_faulty\"]\n");
  Server server(read_deployment("pd.toml", manifest));
  auto r = server.gateway().generate(request_for(server, prompts()[0], 6));
  INFO(r.error);
  REQUIRE(r.finish_reason == "length");
  REQUIRE(r.tokens == expected[0]);
  REQUIRE(r.path.size() == 3);
  REQUIRE(r.path[0].outcome == "prefilled");
  REQUIRE(r.path[1].engine == "decode");
  REQUIRE(r.path[1].outcome == "failed");
  REQUIRE(r.path[2].engine == "prefill");
  REQUIRE(r.path[2].outcome == "answered");
  require_exact_accounting(server, "prefill");
}

}  // namespace disaggregation_tests

namespace disaggregation_tests {

TEST_CASE("disaggregation over UCX: a decode engine nobody listens for is a failed save named in the log and status, and the answer is the same",
          "[server][disaggregation][kv_connector]") {
  const std::vector<std::vector<int32_t>> expected = one_engine_answers("f16", "attention.reference");
  // The prefill engine sends to a port where nothing listens; the decode engine receives nothing.
  const std::string nowhere = "127.0.0.1:" + std::to_string(free_tcp_port());
  Server server(read_deployment("pd.toml", header() +
                                               engine("prefill", "prefill", "f16", "attention.reference",
                                                      ucx("peers = \"" + nowhere + "\", timeout_ms = 300")) +
                                               engine("decode", "decode", "f16", "attention.reference", ucx("max_bytes = 1048576")) +
                                               "\n[router]\nplugin = \"router.disaggregated\"\nconfig = { min_prompt_tokens = 16 }\n"));
  auto r = server.gateway().generate(request_for(server, prompts()[0], 6));
  INFO(r.error);
  REQUIRE(r.finish_reason == "length");
  REQUIRE(r.tokens == expected[0]);  // the decode engine computed the prompt again
  REQUIRE(r.path.size() == 2);
  REQUIRE(r.path[1].engine == "decode");
  const auto prefill = engine_status(server, "prefill")["kv_connectors"]["layers"][0];
  const auto decode = engine_status(server, "decode")["kv_connectors"]["layers"][0];
  INFO(prefill.dump() << "\n" << decode.dump());
  REQUIRE(prefill["save_failures"].get<uint64_t>() >= 1);
  REQUIRE(prefill["last_failure"].get<std::string>().find(nowhere) != std::string::npos);
  REQUIRE(decode["hits"] == 0);
  require_exact_accounting(server, "prefill");
  require_exact_accounting(server, "decode");
}

TEST_CASE("disaggregation over actor messages: a decode engine rebuilt by a swap is reached under its name, and a peer "
          "without the connector is a failed save named in the status",
          "[server][disaggregation][kv_connector]") {
  const std::vector<std::vector<int32_t>> expected = one_engine_answers("f16", "attention.reference");
  Server server(read_deployment("pd.toml", header() +
                                               engine("prefill", "prefill", "f16", "attention.reference",
                                                      actor("peers = \"decode, plain\", timeout_ms = 300")) +
                                               engine("decode", "decode", "f16", "attention.reference", actor("")) +
                                               engine("plain", "both", "f16", "attention.reference", "") +
                                               "\n[router]\nplugin = \"router.disaggregated\"\nconfig = { min_prompt_tokens = 16 }\n"));
  // "plain" runs but has no kv_connector.actor layer: the host drops what is sent there, the save
  // waits for its answer in vain and fails naming it; the decode engine got the blocks all the same.
  auto r = server.gateway().generate(request_for(server, prompts()[0], 6));
  INFO(r.error);
  REQUIRE(r.tokens == expected[0]);
  REQUIRE(r.path.size() == 2);
  REQUIRE(r.path[1].engine == "decode");
  auto prefill = engine_status(server, "prefill")["kv_connectors"]["layers"][0];
  auto decode = engine_status(server, "decode")["kv_connectors"]["layers"][0];
  INFO(prefill.dump() << "\n" << decode.dump());
  REQUIRE(prefill["save_failures"].get<uint64_t>() >= 1);
  REQUIRE(prefill["last_failure"].get<std::string>().find("no answer from peer plain") != std::string::npos);
  REQUIRE(decode["hits"] == 1);
  REQUIRE(decode["loaded_blocks"] == kPerPrompt);

  // A kvcache swap rebuilds the decode engine (a new worker, a new memory tier): the prefill engine's
  // next save reaches the new one under the same name, which loads from it.
  REQUIRE_THAT(server.set_slot("decode", "kvcache", "kvcache.prefix", toml::table{{"block_size", 8}, {"n_blocks", int64_t(kBlocks)}}),
               Catch::Contains("a new engine"));
  auto again = server.gateway().generate(request_for(server, prompts()[1], 6));
  INFO(again.error);
  REQUIRE(again.tokens == expected[1]);
  REQUIRE(again.path.size() == 2);
  REQUIRE(again.path[1].engine == "decode");
  decode = engine_status(server, "decode")["kv_connectors"]["layers"][0];
  INFO(decode.dump());
  REQUIRE(decode["hits"] == 1);  // the rebuilt engine's counts start again
  REQUIRE(decode["loaded_blocks"] == kPerPrompt);
  require_exact_accounting(server, "prefill");
  require_exact_accounting(server, "decode");
}

}  // namespace disaggregation_tests
