// A running server: requests flow gateway -> router -> engine -> worker through the plugins; invalid
// admin changes are refused; bad requests get clear errors; shutdown ends every request. Swaps under
// load are in test_hot_swap.cpp.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include <atomic>
#include <future>
#include <thread>

#include "eventually.hpp"
#include "server/engine_handle.hpp"
#include "test_server.hpp"
#include "files.hpp"
#include "runtime/make_model.hpp"

namespace server_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;


TEST_CASE("server: concurrent requests give exactly the tokens each gives alone", "[server]") {
  auto server = make_test_server();
  auto expected = outputs_alone(*server, 12);
  std::vector<std::future<GenerateResult>> futures;
  for (int round = 0; round < 3; ++round)
    for (const auto& p : mixed_prompts())
      futures.push_back(std::async(std::launch::async, [&, p] { return server->gateway().generate(request_for(*server, p, 12)); }));
  for (size_t i = 0; i < futures.size(); ++i) {
    auto r = futures[i].get();
    REQUIRE(r.finish_reason == "length");
    REQUIRE(r.tokens == expected[i % expected.size()]);
  }
  auto status = server->status();
  REQUIRE(status["engines"][0]["sequences"] == 0);
  REQUIRE(status["engines"][0]["kv"]["free_blocks"] == status["engines"][0]["kv"]["total_blocks"]);
}

TEST_CASE("server: a small KV cache forces preemption and outputs stay identical", "[server]") {
  auto server = make_test_server("", 12);  // 12 blocks of 8 positions: a few sequences at a time
  auto expected = outputs_alone(*server, 20);
  std::vector<std::future<GenerateResult>> futures;
  for (const auto& p : mixed_prompts())
    futures.push_back(std::async(std::launch::async, [&, p] { return server->gateway().generate(request_for(*server, p, 20)); }));
  for (size_t i = 0; i < futures.size(); ++i) {
    auto r = futures[i].get();
    REQUIRE(r.finish_reason == "length");
    REQUIRE(r.tokens == expected[i]);
  }
  auto status = server->status();
  INFO(status.dump());
  REQUIRE(status["engines"][0]["preemptions"].get<int>() > 0);
  REQUIRE(status["engines"][0]["kv"]["free_blocks"] == 12);
}

TEST_CASE("server: a request that outgrows the whole KV pool stops there with length, and the engine goes on", "[server]") {
  auto server = make_test_server("", 4);  // 4 blocks of 8 positions: 32 positions in all
  auto with_prompt = [&](size_t n, uint32_t max_tokens) {
    GenerateRequest r = request_for(*server, "x", max_tokens);
    r.prompt.assign(n, r.prompt.front());
    return r;
  };
  // Alone, each fills the pool and stops: 20 + 12 and 31 + 1 positions, not the tokens asked for.
  auto r = server->gateway().generate(with_prompt(20, 30));
  INFO(r.error);
  REQUIRE(r.finish_reason == "length");
  REQUIRE(r.tokens.size() == 12);
  r = server->gateway().generate(with_prompt(31, 4));
  REQUIRE(r.finish_reason == "length");
  REQUIRE(r.tokens.size() == 1);
  // A prompt the pool cannot hold at all is an error naming the blocks.
  r = server->gateway().generate(with_prompt(40, 4));
  REQUIRE(r.finish_reason == "error");
  REQUIRE_THAT(r.error, Contains("needs 5 KV blocks") && Contains("has 4"));
  // Two at once take turns (one is preempted while the other fills the pool) and both end the same way.
  auto a = std::async(std::launch::async, [&] { return server->gateway().generate(with_prompt(20, 30)); });
  auto b = std::async(std::launch::async, [&] { return server->gateway().generate(with_prompt(20, 30)); });
  for (auto* f : {&a, &b}) {
    auto x = f->get();
    REQUIRE(x.finish_reason == "length");
    REQUIRE(x.tokens.size() == 12);
  }
  REQUIRE(server->gateway().generate(request_for(*server, "fine", 2)).finish_reason == "length");
  const auto status = server->status();
  REQUIRE(status["engines"][0]["kv"]["free_blocks"] == 4);
}

TEST_CASE("server: invalid slot changes are refused with the reason and change nothing", "[server][admin]") {
  auto server = make_test_server();
  auto before = server->status();
  toml::table typo;
  typo.insert("max_prefil_chunk", 3);
  REQUIRE_THROWS_WITH(server->set_slot("main", "scheduler", "scheduler.fifo", typo), Contains("did you mean 'max_prefill_chunk'?"));
  toml::table range;
  range.insert("max_prefill_chunk", 0);
  REQUIRE_THROWS_WITH(server->set_slot("main", "scheduler", "scheduler.fifo", range), Contains("out of range"));
  REQUIRE_THROWS_WITH(server->set_slot("main", "scheduler", "router.round_robin", {}), Contains("is a router plugin"));
  REQUIRE_THROWS_WITH(server->set_slot("mian", "scheduler", "scheduler.fifo", {}), Contains("did you mean 'main'?"));
  REQUIRE_THROWS_WITH(server->set_slot("main", "schedular", "scheduler.fifo", {}), Contains("did you mean 'scheduler'?"));
  REQUIRE_THROWS_WITH(server->set_slot("main", "moe", "moe.topk", {}), Contains("dense model"));
  REQUIRE_THROWS_WITH(server->unload_slot("main", "attention"), Contains("is required"));
  auto after = server->status();
  REQUIRE(before["engines"] == after["engines"]);
  REQUIRE(server->gateway().generate(request_for(*server, "ok", 2)).finish_reason == "length");
}

TEST_CASE("server: spec_decode can be loaded into its empty slot and unloaded", "[server][admin]") {
  auto server = make_test_server();
  REQUIRE(server->status()["engines"][0]["spec_decode"].is_null());
  REQUIRE_THAT(server->set_slot("main", "spec_decode", "spec_decode.ngram", {}), Contains("(none) -> spec_decode.ngram"));
  REQUIRE(server->status()["engines"][0]["spec_decode"]["id"] == "spec_decode.ngram");
  REQUIRE_THAT(server->unload_slot("main", "spec_decode"), Contains("-> (none)"));
  REQUIRE(server->status()["engines"][0]["spec_decode"].is_null());
}

TEST_CASE("server: bad requests end with an error naming the problem", "[server]") {
  auto server = make_test_server();
  GenerateRequest empty;
  empty.id = server->gateway().next_sequence_id();
  auto r = server->gateway().generate(empty);
  REQUIRE(r.finish_reason == "error");
  REQUIRE_THAT(r.error, Contains("prompt is empty"));
  auto too_long = request_for(*server, std::string(300, 'a'), 4);
  r = server->gateway().generate(too_long);
  REQUIRE(r.finish_reason == "error");
  REQUIRE_THAT(r.error, Contains("holds at most 255"));
  auto bad_token = request_for(*server, "x", 2);
  bad_token.prompt.push_back(100000);
  r = server->gateway().generate(bad_token);
  REQUIRE(r.finish_reason == "error");
  REQUIRE_THAT(r.error, Contains("outside the vocabulary"));
  REQUIRE(server->gateway().generate(request_for(*server, "fine", 2)).finish_reason == "length");
}

TEST_CASE("server: shutdown lets running requests finish and refuses new ones", "[server][shutdown]") {
  auto server = make_test_server();
  std::vector<std::future<GenerateResult>> running;
  for (int i = 0; i < 8; ++i)
    running.push_back(std::async(std::launch::async, [&, i] { return server->gateway().generate(request_for(*server, "run " + std::to_string(i), 200)); }));
  for (int i = 0; i < 5000 && server->gateway().in_flight() < 8; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(server->gateway().in_flight() > 0);
  auto started = std::chrono::steady_clock::now();
  server->shutdown(std::chrono::seconds(20));
  REQUIRE(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
  for (auto& f : running) {
    REQUIRE(f.wait_for(std::chrono::seconds(5)) == std::future_status::ready);
    auto r = f.get();
    // Each either finished or ended with the shutdown error: none hangs, none is cut silently.
    if (r.finish_reason == "length") REQUIRE(r.tokens.size() == 200);
    else REQUIRE_THAT(r.error, Contains("shutting down"));
  }
  auto late = server->gateway().generate(request_for(*server, "late", 2));
  REQUIRE(late.finish_reason == "error");
  REQUIRE_THAT(late.error, Contains("shutting down"));
}

TEST_CASE("server: an MoE model runs its feed-forward through the moe plugin", "[server][moe]") {
  const std::string moe_manifest = moe_test_manifest();
  Server server(read_deployment("moe.toml", moe_manifest));
  auto expected = outputs_alone(server, 10);
  std::vector<std::future<GenerateResult>> futures;
  for (const auto& p : mixed_prompts())
    futures.push_back(std::async(std::launch::async, [&, p] { return server.gateway().generate(request_for(server, p, 10)); }));
  for (size_t i = 0; i < futures.size(); ++i) REQUIRE(futures[i].get().tokens == expected[i]);
  REQUIRE(server.status()["engines"][0]["moe"]["id"] == "moe.topk");

  // Every token of every step went through both layers to 2 of the 4 experts: the admin status counts
  // them per layer and expert (2 x the rows computed per layer), with each layer's imbalance (the
  // busiest expert over the mean, recomputed here), and /metrics the same counts.
  const nlohmann::json status = server.status();
  const nlohmann::json load = status["engines"][0]["expert_load"];
  INFO(load.dump());
  const std::string text = server.metrics().prometheus_text();
  auto series = [&](const std::string& name, const std::string& labels) {
    const size_t at = text.find(name + "{" + labels + ",");  // the exposition adds experiment and arm
    INFO(name << "{" << labels << "} in:\n" << text);
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(text.find("} ", at) + 2));
  };
  const double rows = series("tokenhost_step_tokens_total", "engine=\"main\"");
  REQUIRE(load["experts"] == 4);
  REQUIRE(load["layers"].size() == 2);
  double worst = 0;
  for (const auto& layer : load["layers"]) {
    const auto tokens = layer["tokens"].get<std::vector<uint64_t>>();
    REQUIRE(tokens.size() == 4);
    uint64_t sum = 0, most = 0;
    for (size_t e = 0; e < tokens.size(); ++e) {
      sum += tokens[e], most = std::max(most, tokens[e]);
      const std::string labels = "engine=\"main\",layer=\"" + std::to_string(layer["layer"].get<int>()) + "\",expert=\"" + std::to_string(e) + "\"";
      if (tokens[e] > 0) REQUIRE(series("tokenhost_moe_expert_tokens_total", labels) == double(tokens[e]));
    }
    REQUIRE(double(sum) == 2 * rows);
    const double imbalance = double(most) * 4 / double(sum);
    REQUIRE(layer["imbalance"].get<double>() == Approx(imbalance));
    REQUIRE(series("tokenhost_moe_expert_imbalance", "engine=\"main\",layer=\"" + std::to_string(layer["layer"].get<int>()) + "\"") ==
            Approx(imbalance));
    worst = std::max(worst, imbalance);
  }
  REQUIRE(load["max_imbalance"].get<double>() == Approx(worst));

  // The same model without its moe slot is refused before anything starts.
  std::string without = moe_manifest.substr(0, moe_manifest.find("moe = {"));
  REQUIRE_THROWS_WITH(read_deployment("moe.toml", without), Contains("a moe plugin is required for an MoE model"));
}

TEST_CASE("server: an MoE engine over two expert partitions rebalancing under load loses nothing and keeps its greedy outputs", "[server][moe]") {
  // The same model without partitions gives the reference outputs.
  std::vector<std::vector<int32_t>> expected;
  {
    Server plain(read_deployment("moe.toml", moe_test_manifest()));
    expected = outputs_alone(plain, 12);
  }
  std::string manifest = moe_test_manifest();
  manifest.replace(manifest.find("moe = { plugin = \"moe.topk\" }"), std::string("moe = { plugin = \"moe.topk\" }").size(),
                   "moe = { plugin = \"moe.eplb\", config = { min_improvement = 0.0 } }\n"
                   "expert_partitions = [\"experts0\", \"experts1\"]\nexpert_replicas = 2\nrebalance_steps = 2\n");
  manifest += "\n[partitions.experts0]\nthreads = 1\n[partitions.experts1]\nthreads = 1\n";
  Server server(read_deployment("moe.toml", manifest));
  for (int round = 0; round < 2; ++round) {  // concurrent prompts, twice: placements change between steps
    std::vector<std::future<GenerateResult>> futures;
    for (const auto& p : mixed_prompts())
      futures.push_back(std::async(std::launch::async, [&, p] { return server.gateway().generate(request_for(server, p, 12)); }));
    for (size_t i = 0; i < futures.size(); ++i) {
      const GenerateResult r = futures[i].get();
      INFO("round " << round << " prompt " << i << " error " << r.error);
      REQUIRE(r.finish_reason == "length");
      REQUIRE(r.tokens == expected[i]);
    }
  }
  const nlohmann::json x = server.status()["engines"][0]["expert_parallel"];
  INFO(x.dump());
  REQUIRE(x["partitions"] == nlohmann::json{"experts0", "experts1"});
  REQUIRE(x["rebalances"]["rounds"].get<int>() > 0);
  REQUIRE(x["rebalances"]["changed"].get<int>() > 0);  // the start leaves the 2 spare slots empty: replicas fill them
  REQUIRE(x["rebalances"]["refused"] == 0);
  for (const auto& layer : x["layers"]) {
    const auto slots = layer["slot_expert"].get<std::vector<int32_t>>();
    REQUIRE(slots.size() == 6);  // 4 experts and 2 replicas over 2 partitions of 3 slots
    for (int32_t e = 0; e < 4; ++e) REQUIRE(std::count(slots.begin(), slots.end(), e) >= 1);
  }
  const auto seconds = x["partition_seconds"].get<std::vector<double>>();
  REQUIRE((seconds[0] > 0 && seconds[1] > 0));
  REQUIRE(metric_sum(server, "tokenhost_moe_partition_seconds_total", "experts1", "partition") == Approx(seconds[1]).epsilon(0.01));
  REQUIRE(metric_sum(server, "tokenhost_moe_rebalances_total", "changed", "outcome") == x["rebalances"]["changed"].get<double>());
}

TEST_CASE("server: quantized MoE GGUFs serve concurrent prompts as each is served alone", "[server][moe]") {
  // qwen3moe with q4_K experts (widths of 256), qwen2moe with q8_0 experts and a gated shared expert
  // (its softmax top-k weights taken from the file's architecture).
  TempDir dir;
  struct Shape {
    const char* arch;
    th_dtype type;
    uint32_t dim, ffn;
  };
  for (const Shape& sh : {Shape{"qwen3moe", TH_DTYPE_Q4_K, 256, 256}, Shape{"qwen2moe", TH_DTYPE_Q8_0, 64, 32}}) {
    INFO(sh.arch);
    MakeModelOptions o;
    o.path = dir.file(std::string(sh.arch) + ".gguf");
    o.type = sh.type;
    o.scale = 0.05f;
    o.shape.dim = sh.dim;
    o.shape.n_heads = 4;
    o.shape.n_kv_heads = 2;
    o.shape.ffn_dim = sh.ffn;
    o.shape.vocab_size = 300;
    o.shape.context_len = 256;
    o.shape.n_experts = 8;
    o.shape.n_experts_used = 2;
    o.shape.architecture = sh.arch;
    if (std::string(sh.arch) == "qwen2moe") o.shape.n_shared_experts = 1, o.shape.shared_expert_gate = true;
    make_model(o);
    std::string manifest = moe_test_manifest();
    const size_t from = manifest.find("[models.moe]"), to = manifest.find("[engines.main]");
    manifest.replace(from, to - from, "[models.moe]\nsource = \"gguf\"\npath = \"" + o.path + "\"\n\n");
    Server server(read_deployment("moe.toml", manifest));
    auto expected = outputs_alone(server, 10);
    std::vector<std::future<GenerateResult>> futures;
    for (const auto& p : mixed_prompts())
      futures.push_back(std::async(std::launch::async, [&, p] { return server.gateway().generate(request_for(server, p, 10)); }));
    for (size_t i = 0; i < futures.size(); ++i) REQUIRE(futures[i].get().tokens == expected[i]);
    const nlohmann::json load = server.status()["engines"][0]["expert_load"];
    REQUIRE(load["experts"] == 8);
  }
}

TEST_CASE("server: each step's compute time is exported beside its wall time, and within it, with the tokens it computed", "[server][metrics]") {
  auto server = make_test_server();
  double rows = 0;  // alone, a request computes its prompt and each generated token but the last
  for (const auto& p : mixed_prompts()) {
    REQUIRE(server->gateway().generate(request_for(*server, p, 6)).finish_reason == "length");
    rows += double(p.size() + 6 - 1);
  }
  const std::string text = server->metrics().prometheus_text();
  auto value = [&](const std::string& series) {
    const size_t at = text.find(series + "{engine=\"main\"");
    INFO(series << " in:\n" << text);
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(text.find("} ", at) + 2));
  };
  const double steps = value("tokenhost_step_seconds_count");
  REQUIRE(steps > 0);
  REQUIRE(value("tokenhost_step_compute_seconds_count") == steps);
  REQUIRE(value("tokenhost_step_compute_seconds_sum") > 0);
  REQUIRE(value("tokenhost_step_compute_seconds_sum") <= value("tokenhost_step_seconds_sum"));
  REQUIRE(value("tokenhost_step_tokens_total") == rows);
}

TEST_CASE("server: the status names each model with its weight memory", "[server]") {
  auto server = make_test_server();
  const nlohmann::json models = server->status()["models"];
  INFO(models.dump());
  REQUIRE(models.size() == 1);
  const nlohmann::json& m = models[0];
  REQUIRE(m["name"] == "tiny");
  REQUIRE(m["source"] == "synthetic");
  REQUIRE(m["path"].is_null());
  REQUIRE(m["weight_dtype"] == "f32");
  // The synthetic weights in f32: embedding and output, the final norm, and per layer two norms, the
  // four attention projections and the three feed-forward matrices.
  const auto& i = server->deployment().models.at("tiny").spec.info;
  const uint64_t q = uint64_t(i.n_heads) * i.head_dim, kv = uint64_t(i.n_kv_heads) * i.head_dim;
  const uint64_t per_layer = 2 * i.dim + 2 * q * i.dim + 2 * kv * i.dim + 3 * uint64_t(i.ffn_dim) * i.dim;
  REQUIRE(m["weights_bytes"] == 4 * (2 * uint64_t(i.vocab_size) * i.dim + i.dim + i.n_layers * per_layer));
  REQUIRE(m["packed_bytes"] == 0);  // f32 weights are never packed
}

TEST_CASE("server: the router plugin's feedback carries the request's TTFT, total time, tokens and output text",
          "[server][router]") {
  auto server = make_test_server();
  REQUIRE_THAT(server->set_slot("", "router", server->register_plugin(fixture("router_v1")), {}), Contains("router.fixture"));
  auto r = server->gateway().generate(request_for(*server, "feedback", 6));
  REQUIRE(r.finish_reason == "length");
  REQUIRE(r.ttft_s.has_value());
  // The feedback is given before the answer is delivered: the gauges hold this request's figures.
  const std::string text = server->metrics().prometheus_text();
  auto value = [&](const std::string& family) {
    const std::string prefix = "tokenhost_plugin_" + family + "{";
    const size_t at = text.find("\n" + prefix);
    INFO(family << " in\n" << text);
    REQUIRE(at != std::string::npos);
    const size_t end = text.find('\n', at + 1);
    return std::stod(text.substr(text.rfind(' ', end) + 1, end - text.rfind(' ', end) - 1));
  };
  CHECK(value("fixture_feedback_calls") == 1);
  CHECK(value("fixture_feedback_tokens_out") == 6);
  // The synthetic model's tokens are one byte each: six tokens of text are six bytes.
  CHECK(value("fixture_feedback_output_bytes") == Approx(double(server->gateway().decode(r.tokens).size())));
  CHECK(value("fixture_feedback_output_bytes") > 0);
  const double ttft = value("fixture_feedback_ttft_seconds"), total = value("fixture_feedback_total_seconds");
  CHECK(ttft > 0);
  CHECK(ttft == Approx(*r.ttft_s));
  CHECK(total >= ttft);
}

TEST_CASE("server: plugin manifests register only from the plugin folders unless the deployment opts in", "[server][admin]") {
  auto outside = [](const std::string& server_lines) {
    std::string m = test_manifest();
    const std::string opt = "plugins_from_anywhere = true\n";
    m.replace(m.find(opt), opt.size(), server_lines);
    return std::make_unique<Server>(read_deployment("test.toml", m));
  };
  {
    auto server = outside("");
    for (const std::string& path : {fixture("router_v1"), fixture_dir() + "/router_v1/../router_v2/plugin.toml",
                                    std::string("/dev/zero"), std::string("/nonexistent/plugin.toml")}) {
      try {
        server->register_plugin(path);
        FAIL("registered " << path);
      } catch (const AdminError& e) {
        CHECK(e.http_status == 403);
        CHECK_THAT(e.what(), Contains("is outside the plugin folders") && Contains("plugins_from_anywhere"));
      }
    }
  }
  // A folder named in plugin_paths holding the fixture: inside it, it registers; a path that climbs out
  // of it with ".." does not.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tokenhost-plugin-folder-" + std::to_string(::getpid()));
  fs::create_directories(dir / "router_v1");
  for (const auto& f : fs::directory_iterator(fs::path(fixture("router_v1")).parent_path()))
    fs::copy(f.path(), dir / "router_v1" / f.path().filename(), fs::copy_options::overwrite_existing);
  {
    auto server = outside("plugin_paths = [\"" + dir.string() + "\"]\n");
    CHECK(server->register_plugin((dir / "router_v1" / "plugin.toml").string()) == "router.fixture");
    try {
      server->register_plugin((dir / ".." / "x" / "plugin.toml").string());
      FAIL("registered a file above the plugin folder");
    } catch (const AdminError& e) {
      CHECK(e.http_status == 403);
    }
  }
  fs::remove_all(dir);
}

}  // namespace server_tests
