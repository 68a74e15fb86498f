// A/B experiments on a running server: sticky keys keep their arm, a request may choose its arm only
// where the experiment allows it, two arms of one model hold one copy of its weights, continuous
// batching beats static batching on time to first token with a significant verdict, the admin API
// refuses requests without its token and malformed changes without changing anything, /metrics labels
// engine series with their arm.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <unistd.h>

#include "openai_client.hpp"
#include "runtime/make_model.hpp"

namespace server_experiments_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using nlohmann::json;
using Catch::Matchers::Contains;

namespace {

// Two engines on one model (continuous and static batching), an idle third, and an experiment; or
// with `one_engine`, the continuous one alone.
std::string ab_manifest(const std::string& model_table, const std::string& experiment, uint32_t n_blocks = 256,
                        bool one_engine = false) {
  auto engine = [&](const std::string& name, const std::string& scheduler) {
    return "[engines." + name + "]\nmodel = \"m\"\nmax_step_tokens = 256\nmax_step_seqs = 32\n"
           "attention = { plugin = \"attention.cpu_flash\" }\n"
           "kvcache = { plugin = \"kvcache.paged\", config = { block_size = 16, n_blocks = " + std::to_string(n_blocks) + " } }\n"
           "scheduler = { plugin = \"" + scheduler + "\" }\n\n";
  };
  return "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nlog_level = \"warn\"\nhttp_threads = 32\n"
         "admin_token = \"test-admin-token-0123456789\"\n\n" +
         model_table + "\n" + engine("cont", "scheduler.continuous") +
         (one_engine ? "" : engine("stat", "scheduler.static") + engine("spare", "scheduler.fifo")) + experiment;
}

const std::string kTinyModel = "[models.m]\nseed = 7\ndim = 32\nn_layers = 2\nn_heads = 4\nn_kv_heads = 2\ncontext_len = 256\n";

const std::string kExperiment = R"(
[experiments.sched]
sticky_key = "session"
allow_request_choice = true
min_samples = 10
arms = [{ name = "a", engine = "stat", percent = 50 },
        { name = "b", engine = "cont", percent = 50, holdback_classes = ["batch"] }]
)";

GenerateRequest keyed(Server& server, const std::string& session, const std::string& arm = "") {
  GenerateRequest r = request_for(server, "hello there", 4);
  r.session_key = session;
  r.arm = arm;
  return r;
}

// Resident bytes of the process (/proc/self/statm).
size_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  size_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * size_t(sysconf(_SC_PAGESIZE));
}

// Mappings of `path` in this process and their resident bytes (/proc/self/smaps).
std::pair<int, size_t> mapped_resident(const std::string& path) {
  std::ifstream in("/proc/self/smaps");
  int mappings = 0;
  size_t rss = 0;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') < 16) {
      inside = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0;
      mappings += inside;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      rss += std::stoull(line.substr(4)) * 1024;
    }
  }
  return {mappings, rss};
}

HttpClient admin_client(const LiveServer& s, bool with_token = true) {
  HttpClientOptions options;
  if (with_token) options.headers.emplace_back("Authorization", "Bearer test-admin-token-0123456789");
  return HttpClient("127.0.0.1", s.http->admin_port(), std::move(options));
}

json body_of(const HttpClientResult& r) { return r.ok() ? json::parse(r.body, nullptr, false) : json(); }

}  // namespace

TEST_CASE("experiments: the same session key always lands on the same arm, and a class is held back", "[server][experiments]") {
  Server server(read_deployment("ab.toml", ab_manifest(kTinyModel, kExperiment)));
  const auto& spec = server.deployment().experiments.at(0);
  for (int i = 0; i < 20; ++i) {
    const std::string key = "client-" + std::to_string(i);
    const std::string expected = spec.arms[experiments::assign(spec, experiments::bucket_of("sched", key), "").arm].engine;
    for (int repeat = 0; repeat < 3; ++repeat) {
      auto r = server.gateway().generate(keyed(server, key));
      INFO(r.error);
      REQUIRE(r.finish_reason == "length");
      REQUIRE(r.engine == expected);
    }
  }
  for (int i = 0; i < 10; ++i) {
    auto r = keyed(server, "batch-" + std::to_string(i));
    r.request_class = "batch";
    REQUIRE(server.gateway().generate(std::move(r)).engine == "stat");  // arm b is held back from class batch
  }
  auto report = server.experiment_report("sched");
  const uint64_t compared = report["arms"][0]["requests"].get<uint64_t>() + report["arms"][1]["requests"].get<uint64_t>();
  REQUIRE(compared == 60);
  REQUIRE(report["arms"][0]["held_back"] == 10);
  REQUIRE(report["arms"][0]["ttft_s"]["n"].get<uint64_t>() == report["arms"][0]["requests"].get<uint64_t>());
  for (const json& arm : report["arms"]) {  // each arm's load: its engine's steps since the start
    INFO(arm.dump());
    REQUIRE(arm["load"]["steps"].get<uint64_t>() > 0);
    REQUIRE(arm["load"]["tokens"].get<uint64_t>() >= arm["load"]["steps"].get<uint64_t>());
    REQUIRE(arm["load"]["step_s_mean"].get<double>() > 0);
    REQUIRE(arm["plugin_metrics"].find("tokenhost_step_seconds_count") == arm["plugin_metrics"].end());
  }
  // The spare engine is no arm: it may be removed; an arm may not while the experiment runs.
  REQUIRE_THROWS_WITH(server.remove_engine("cont", std::chrono::seconds(1)), Contains("arm of running experiment 'sched'"));
  REQUIRE_THAT(server.remove_engine("spare", std::chrono::seconds(1)), Contains("removed engine spare"));
  server.stop_experiment("sched");
  REQUIRE_THAT(server.remove_engine("cont", std::chrono::seconds(1)), Contains("removed engine cont"));
  REQUIRE(server.experiment_report("sched")["state"] == "stopped");
}

TEST_CASE("experiments: a request chooses its arm where the experiment allows it, else a 400 naming the field",
          "[server][experiments]") {
  LiveServer live(ab_manifest(kTinyModel, kExperiment));
  auto ask = [&](json tokenhost) {
    return post(live, "/v1/completions", json{{"prompt", "hi"}, {"max_tokens", 2}, {"tokenhost", tokenhost}}.dump());
  };
  for (int i = 0; i < 3; ++i) REQUIRE(ask({{"arm", "b"}}).status == 200);
  auto report = live.server->experiment_report("sched");
  REQUIRE(report["arms"][1]["chosen"] == 3);
  REQUIRE(report["arms"][1]["requests"] == 0);  // chosen requests are not in the comparison

  auto missing = ask({{"arm", "c"}});
  REQUIRE(missing.status == 400);
  REQUIRE(missing.body["error"]["param"] == "tokenhost.arm");
  REQUIRE_THAT(missing.body["error"]["message"].get<std::string>(), Contains("no arm 'c'"));
  auto unknown = ask({{"experiment", "sched"}});
  REQUIRE(unknown.status == 400);
  REQUIRE(unknown.body["error"]["param"] == "tokenhost.experiment");
  auto typed = ask({{"arm", 2}});
  REQUIRE(typed.status == 400);
  REQUIRE(typed.body["error"]["param"] == "tokenhost.arm");

  // Without allow_request_choice the same field is refused.
  auto c = admin_client(live);
  REQUIRE(c.request("DELETE", "/admin/experiments/sched").status == 200);
  json no_choice = {{"name", "strict"}, {"arms", {{{"name", "a"}, {"engine", "stat"}, {"percent", 50}}, {{"name", "b"}, {"engine", "cont"}, {"percent", 50}}}}};
  auto started = c.request("POST", "/admin/experiments", no_choice.dump(), "application/json");
  INFO(started.body);
  REQUIRE(started.status == 200);
  auto refused = ask({{"arm", "b"}});
  REQUIRE(refused.status == 400);
  REQUIRE(refused.body["error"]["param"] == "tokenhost.arm");
  REQUIRE_THAT(refused.body["error"]["message"].get<std::string>(), Contains("allow_request_choice is false"));
}

TEST_CASE("experiments: two arms may differ in their engines' KV dtype, each arm serving from its own",
          "[server][experiments]") {
  // The engines of manifests/ab_kv_dtype.toml on the tiny model: f32 and f16, otherwise the same.
  std::string manifest = ab_manifest(kTinyModel, R"(
[experiments.kv]
allow_request_choice = true
arms = [{ name = "a", engine = "cont", percent = 50 }, { name = "b", engine = "stat", percent = 50 }]
)");
  manifest.replace(manifest.find("[engines.cont]\n"), 15, "[engines.cont]\nkv_dtype = \"f32\"\n");
  LiveServer live(manifest);
  for (const char* arm : {"a", "b"}) {
    auto r = post(live, "/v1/completions",
                  json{{"prompt", "hi"}, {"max_tokens", 4}, {"temperature", 0}, {"tokenhost", {{"arm", arm}}}}.dump());
    INFO(r.body.dump());
    REQUIRE(r.status == 200);
  }
  const json status = live.server->status();
  std::map<std::string, std::string> dtype;
  for (const auto& e : status["engines"]) dtype[e["name"]] = e["kv"]["dtype"];
  CHECK(dtype.at("cont") == "f32");
  CHECK(dtype.at("stat") == "f16");
  auto report = live.server->experiment_report("kv");
  CHECK(report["arms"][0]["chosen"] == 1);
  CHECK(report["arms"][1]["chosen"] == 1);
}

TEST_CASE("experiments: two arms may differ in their moe plugin's gating, each arm's engine routing as its settings say",
          "[server][experiments][moe]") {
  // One MoE model (4 experts, 2 per token), two engines: moe.topk as the model says, and moe.topk with a
  // capacity (each expert takes at most half its even share of a step's choices; the rest are dropped).
  std::string manifest = ab_manifest("[models.m]\nseed = 5\ndim = 32\nn_layers = 2\nn_heads = 4\nn_kv_heads = 2\n"
                                     "ffn_dim = 24\nn_experts = 4\nn_experts_used = 2\ncontext_len = 256\n",
                                     R"(
[experiments.gating]
allow_request_choice = true
arms = [{ name = "a", engine = "cont", percent = 50 }, { name = "b", engine = "stat", percent = 50 }]
)");
  manifest.replace(manifest.find("[engines.cont]\n"), 15, "[engines.cont]\nmoe = { plugin = \"moe.topk\" }\n");
  manifest.replace(manifest.find("[engines.stat]\n"), 15,
                   "[engines.stat]\nmoe = { plugin = \"moe.topk\", config = { capacity_factor = 0.5 } }\n");
  manifest.replace(manifest.find("[engines.spare]\n"), 16, "[engines.spare]\nmoe = { plugin = \"moe.topk\" }\n");
  Server server(read_deployment("ab_moe.toml", manifest));
  for (const char* arm : {"a", "b"})
    for (int i = 0; i < 3; ++i) {
      GenerateRequest r = request_for(server, "the quick brown fox jumps over the lazy dog", 6);
      r.arm = arm;
      REQUIRE(server.gateway().generate(r).finish_reason == "length");
    }
  const json report = server.experiment_report("gating");
  CHECK(report["arms"][0]["chosen"] == 3);
  CHECK(report["arms"][1]["chosen"] == 3);
  // Every choice of arm a's engine is routed (2 per token and layer); arm b's engine drops some.
  std::map<std::string, uint64_t> routed;
  const json status = server.status();
  for (const auto& e : status["engines"]) {
    if (!e.contains("expert_load")) continue;
    for (const auto& layer : e["expert_load"]["layers"])
      for (uint64_t t : layer["tokens"].get<std::vector<uint64_t>>()) routed[e["name"]] += t;
  }
  const double rows_a = metric_sum(server, "tokenhost_step_tokens_total", "cont", "engine");
  const double rows_b = metric_sum(server, "tokenhost_step_tokens_total", "stat", "engine");
  INFO("routed a " << routed["cont"] << " of " << rows_a << " rows, b " << routed["stat"] << " of " << rows_b);
  REQUIRE(rows_a > 0);
  REQUIRE(rows_b > 0);
  CHECK(double(routed["cont"]) == 2 * 2 * rows_a);
  CHECK(double(routed["stat"]) < 2 * 2 * rows_b);
}

TEST_CASE("experiments: the admin API refuses requests without the token, and malformed changes change nothing",
          "[server][experiments][admin]") {
  LiveServer live(ab_manifest(kTinyModel, kExperiment));
  auto anonymous = admin_client(live, false);
  REQUIRE(anonymous.request("GET", "/admin/experiments").status == 401);
  REQUIRE(anonymous.request("GET", "/admin/experiments/sched/report").status == 401);
  REQUIRE(anonymous.request("POST", "/admin/experiments", "{}", "application/json").status == 401);
  REQUIRE(anonymous.request("PATCH", "/admin/experiments/sched", R"({"arms": [{"name": "a", "percent": 100}]})", "application/json").status == 401);
  REQUIRE(anonymous.request("DELETE", "/admin/experiments/sched").status == 401);

  auto c = admin_client(live);
  auto list = [&] { return body_of(c.request("GET", "/admin/experiments")); };
  auto engines_of = [&] {  // where 30 sticky keys go now
    std::vector<std::string> out;
    for (int i = 0; i < 30; ++i) out.push_back(live.server->gateway().generate(keyed(*live.server, "k" + std::to_string(i))).engine);
    return out;
  };
  const json before = list();
  REQUIRE(before["experiments"][0]["name"] == "sched");
  REQUIRE(before["experiments"][0]["arms"][1]["holdback_classes"] == json{"batch"});
  const auto split_before = engines_of();
  const json report_before = body_of(c.request("GET", "/admin/experiments/sched/report"));

  struct Bad {
    std::string method, path, body;
    int status;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {"PATCH", "/admin/experiments/sched", R"({"arms": [{"name": "a", "percent": 70}]})", 400, "sum to 120"},
      {"PATCH", "/admin/experiments/sched", R"({"arms": [{"name": "a", "percent": "70"}]})", 400, "arms[0].percent"},
      {"PATCH", "/admin/experiments/sched", R"({"arms": [{"name": "z", "percent": 70}]})", 400, "no arm 'z'"},
      {"PATCH", "/admin/experiments/sched", R"({"arms": [{"name": "a", "engine": "spare"}]})", 400, "engine cannot change"},
      {"PATCH", "/admin/experiments/sched", R"({"split": 5})", 400, "unknown field 'split'"},
      {"PATCH", "/admin/experiments/sched", "not json", 400, "malformed JSON"},
      {"PATCH", "/admin/experiments/nope", R"({"arms": [{"name": "a", "percent": 100}]})", 404, "no running experiment"},
      {"POST", "/admin/experiments", R"({"name": "x", "arms": [{"name": "a", "engine": "spare", "percent": 50}, {"name": "b", "engine": "nope", "percent": 50}]})", 404, "no engine 'nope'"},
      {"POST", "/admin/experiments", R"({"name": "x", "arms": [{"name": "a", "engine": "spare", "percent": 50}, {"name": "b", "engine": "cont", "percent": 50}]})", 409, "arm of running experiment 'sched'"},
      {"POST", "/admin/experiments", R"({"name": "sched", "arms": [{"name": "a", "engine": "spare", "percent": 100}, {"name": "b", "engine": "spare", "percent": 0}]})", 409, ""},
      {"POST", "/admin/experiments", R"({"name": "x", "sticky_key": "cookie", "arms": []})", 400, "sticky_key"},
      {"DELETE", "/admin/experiments/nope", "", 404, "no experiment 'nope'"},
      {"DELETE", "/admin/engines/stat", "", 409, "arm of running experiment"},
  };
  for (const auto& b : bad) {
    INFO(b.method << " " << b.path << " " << b.body);
    HttpClientResult r = c.request(b.method, b.path, b.body, b.body.empty() ? "" : "application/json");
    INFO(r.message);
    REQUIRE(r.ok());
    INFO(r.body);
    REQUIRE(r.status == b.status);
    REQUIRE_THAT(body_of(r)["error"]["message"].get<std::string>(), Contains(b.says));
  }
  REQUIRE(list() == before);
  REQUIRE(engines_of() == split_before);
  auto report_after = body_of(c.request("GET", "/admin/experiments/sched/report"));
  for (size_t arm = 0; arm < 2; ++arm) {  // only the 30 requests above were added; the split is as it was
    REQUIRE(report_after["arms"][arm]["percent"] == report_before["arms"][arm]["percent"]);
    REQUIRE(report_after["arms"][arm]["engine"] == report_before["arms"][arm]["engine"]);
  }
  REQUIRE(report_after["arms"][0]["requests"].get<int>() + report_after["arms"][1]["requests"].get<int>() == 60);

  // A valid change applies: everything goes to arm a.
  auto ok = c.request("PATCH", "/admin/experiments/sched", R"({"arms": [{"name": "a", "percent": 100}, {"name": "b", "percent": 0}]})", "application/json");
  REQUIRE(ok.status == 200);
  for (const auto& e : engines_of()) REQUIRE(e == "stat");
  // /metrics labels engine series with their experiment and arm; promtool's rules are checked by the CLI test.
  std::string metrics = live.server->metrics().prometheus_text();
  REQUIRE_THAT(metrics, Contains("tokenhost_tokens_out_total{engine=\"stat\",experiment=\"sched\",arm=\"a\"}"));
  REQUIRE_THAT(metrics, Contains("tokenhost_kv_blocks_free{engine=\"spare\",experiment=\"\",arm=\"\"}"));
}

TEST_CASE("experiments: two arms of one model hold one copy of its weights", "[server][experiments][memory][measured]") {
  // A model big enough to see in resident memory: about 38 MiB of f32 weights.
  const std::string path = cache_dir() + "/experiments-memory-test.gguf";
  if (!std::filesystem::exists(path)) {
    MakeModelOptions make;
    make.path = path;
    make.shape.dim = 256;
    make.shape.n_layers = 12;
    make.shape.n_heads = 8;
    make.shape.n_kv_heads = 8;
    make.shape.ffn_dim = 688;
    make.shape.context_len = 256;
    std::filesystem::create_directories(cache_dir());
    make_model(make);
  }
  const size_t file_bytes = std::filesystem::file_size(path);
  const std::string model = "[models.m]\nsource = \"gguf\"\npath = \"" + path + "\"\n";
  auto generate_on = [](Server& server, const std::string& arm) {
    auto r = keyed(server, "", arm);
    auto result = server.gateway().generate(std::move(r));
    INFO(result.error);
    REQUIRE(result.finish_reason != "error");
    return result.engine;
  };
  size_t one_engine = 0;
  {
    const size_t before = resident_bytes();
    Server server(read_deployment("one.toml", ab_manifest(model, "", 4, true)));
    generate_on(server, "");
    one_engine = resident_bytes() - before;
    server.shutdown();
  }
  const size_t before = resident_bytes();
  Server server(read_deployment("two.toml", ab_manifest(model, kExperiment, 4)));
  REQUIRE(generate_on(server, "a") == "stat");
  REQUIRE(generate_on(server, "b") == "cont");
  const size_t two_arms = resident_bytes() - before;
  auto [mappings, file_resident] = mapped_resident(path);
  INFO("file " << file_bytes << " B, one engine +" << one_engine << " B, two arms +" << two_arms << " B, "
               << mappings << " mapping(s) of the file holding " << file_resident << " B");
  REQUIRE(one_engine > file_bytes * 8 / 10);             // the weights are what the measurement sees
  REQUIRE(two_arms < one_engine + file_bytes / 2);       // a second copy would add ~file_bytes
  REQUIRE(mappings == 1);
  REQUIRE(file_resident <= file_bytes + (1 << 20));
}

TEST_CASE("experiments: continuous batching beats static batching on time to first token, significantly",
          "[server][experiments][ab]") {
  // 16 concurrent streams on stories260K, requests spread evenly over the arms (sticky_key = "none").
  const std::string model = "[models.m]\nsource = \"gguf\"\npath = \"" + require_model_file("stories260K.gguf") + "\"\n";
  const std::string experiment = R"(
[experiments.batching]
sticky_key = "none"
min_samples = 30
arms = [{ name = "static", engine = "stat", percent = 50 }, { name = "continuous", engine = "cont", percent = 50 }]
)";
  Server server(read_deployment("ab.toml", ab_manifest(model, experiment, 512)));
  std::atomic<bool> stop{false};
  std::atomic<int> failed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 16; ++c)
    clients.emplace_back([&, c] {
      std::mt19937 rng{uint32_t(c)};
      while (!stop) {
        GenerateRequest r = request_for(server, "Once upon a time, there was a little", 24 + rng() % 24);
        r.prompt = server.gateway().encode("Once upon a time, there was a little " + std::to_string(rng() % 1000));
        r.ignore_eos = true;
        if (server.gateway().generate(std::move(r)).finish_reason == "error") ++failed;
      }
    });
  json ttft;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(40);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ttft = server.experiment_report("batching")["comparisons"][0];
    if (ttft["significant"] == true && ttft["baseline_n"].get<int>() >= 60 && ttft["candidate_n"].get<int>() >= 60) break;
  }
  stop = true;
  for (auto& t : clients) t.join();
  auto report = server.experiment_report("batching");
  INFO(report.dump(2));
  REQUIRE(failed == 0);
  REQUIRE(ttft["metric"] == "ttft_s");
  REQUIRE(ttft["significant"] == true);
  REQUIRE(ttft["diff"].get<double>() < 0);
  REQUIRE(ttft["ci95"][1].get<double>() < 0);
  REQUIRE_THAT(ttft["verdict"].get<std::string>(), Contains("continuous is faster (ttft_s"));
}

}  // namespace server_experiments_tests
