// Model groups end to end on stories260K and its q4_0 copy (models/): a cascade escalates exactly when
// the small model's mean log-probability is below the threshold and answers with the small model's
// greedy text otherwise, the large one's when it escalated; the response cache answers repeats byte for
// byte within their namespace only; an ensemble keeps one member's answer and pays for both; routers
// swap under load without losing a request; manifests/cascade.toml serves as it is.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness.hpp"
#include "models.hpp"
#include "openai_client.hpp"
#include "stories_group.hpp"
#include "test_server.hpp"

namespace server_model_groups_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

namespace {

const std::vector<std::string> kPrompts = {"Once upon a time", "The cat",      "Lily wanted", "Tom and his dog", "One day, a bird",
                                           "The sun was",      "Sue had a toy", "A big tree",  "Ben ran to",      "Mom said"};

GenerateRequest ask(Server& server, const std::string& model, const std::string& prompt, uint32_t max_tokens) {
  GenerateRequest r;
  r.id = server.gateway().next_sequence_id();
  r.model = model;
  r.prompt = server.gateway().find_model(model)->encode(prompt, true, false);
  r.prompt_text = prompt;
  r.max_tokens = max_tokens;
  return r;
}

// The member's greedy answer, asked by its own name, with its tokens' log-probabilities.
GenerateResult direct(Server& server, const std::string& model, const std::string& prompt, uint32_t max_tokens) {
  GenerateRequest r = ask(server, model, prompt, max_tokens);
  r.logprobs = true;
  GenerateResult g = server.gateway().generate(r);
  REQUIRE(g.finish_reason != "error");
  return g;
}

double mean_logprob(const GenerateResult& g) {
  double sum = 0;
  for (const auto& t : g.logprobs) sum += t.logprob;
  return g.logprobs.empty() ? 0 : sum / double(g.logprobs.size());
}

}  // namespace

TEST_CASE("groups: a cascade escalates exactly when the small model's mean log-probability is below the threshold", "[server][groups]") {
  constexpr uint32_t kTokens = 24;
  // The threshold: the median of the small model's signals over the prompts, so that both branches run.
  std::vector<double> signals;
  {
    Server probe(read_deployment("probe.toml", group_manifest("plugin = \"router.round_robin\"")));
    for (const auto& p : kPrompts) signals.push_back(mean_logprob(direct(probe, "q4", p, kTokens)));
  }
  std::vector<double> sorted = signals;
  std::sort(sorted.begin(), sorted.end());
  const double threshold = (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
  std::ostringstream router;
  router << "plugin = \"router.cascade\"\nconfig = { signal = \"mean_logprob\", threshold = " << threshold << " }";
  Server server(read_deployment("cascade.toml", group_manifest(router.str())));
  size_t escalated = 0;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const GenerateResult small = direct(server, "q4", kPrompts[i], kTokens), large = direct(server, "full", kPrompts[i], kTokens);
    const GenerateResult got = server.gateway().generate(ask(server, "stories", kPrompts[i], kTokens));
    INFO(kPrompts[i] << ": signal " << mean_logprob(small) << " against " << threshold << "; " << got.error);
    REQUIRE(got.finish_reason != "error");
    const bool crosses = mean_logprob(small) < threshold;
    REQUIRE(!got.path.empty());
    CHECK(got.path[0].model == "q4");
    CHECK(std::abs(got.path[0].mean_logprob - mean_logprob(small)) < 1e-4);  // the host's signal is the model's
    if (crosses) {
      ++escalated;
      REQUIRE(got.path.size() == 2);
      CHECK(got.path[0].outcome == "escalated");
      CHECK(got.path[1].outcome == "answered");
      CHECK(got.model == "full");
      CHECK(got.tokens == large.tokens);  // the large model's greedy text
      // Each engine's tokens at its declared cost: the small one's up to where it escalated.
      const double prompt = double(ask(server, "stories", kPrompts[i], kTokens).prompt.size());
      CHECK(got.cost == Approx((0.3 * (prompt + got.path[0].tokens) + 1.0 * (prompt + double(got.tokens.size()))) / 1e6));
    } else {
      REQUIRE(got.path.size() == 1);
      CHECK(got.path[0].outcome == "answered");
      CHECK(got.model == "q4");
      CHECK(got.tokens == small.tokens);  // the small model's greedy text
      const double prompt = double(ask(server, "stories", kPrompts[i], kTokens).prompt.size());
      CHECK(got.cost == Approx(0.3 * (prompt + double(got.tokens.size())) / 1e6));
    }
  }
  CHECK(escalated == kPrompts.size() / 2);
  CHECK(metric_sum(server, "tokenhost_router_answers_total", "escalated", "how") == Approx(double(escalated)));
  CHECK(metric_sum(server, "tokenhost_router_answers_total", "cascade_first", "how") == Approx(double(kPrompts.size() - escalated)));
}

TEST_CASE("groups: a cascade checked during generation escalates before the small model ends, and accept_after commits", "[server][groups]") {
  // A threshold no answer reaches: every check escalates as soon as min_tokens are in.
  Server server(read_deployment(
      "early.toml", group_manifest("plugin = \"router.cascade\"\nconfig = { threshold = 0.0, check_every = 4, min_tokens = 4 }")));
  const GenerateResult got = server.gateway().generate(ask(server, "stories", "Once upon a time", 300));
  REQUIRE(got.path.size() == 2);
  CHECK(got.path[0].outcome == "escalated");
  CHECK(got.path[0].tokens >= 4);
  CHECK(got.path[0].tokens < 300);  // left early
  CHECK(got.tokens == direct(server, "full", "Once upon a time", 300).tokens);
  // A threshold every answer passes, with accept_after: the small model answers, its stream committed.
  REQUIRE_THAT(server.set_slot("", "router", "router.cascade",
                               toml::table{{"threshold", -1000.0}, {"check_every", 2}, {"accept_after", 4}}),
               Contains("router.cascade"));
  GenerateRequest r = ask(server, "stories", "The cat", 30);
  auto stream = std::make_shared<TokenStream>();
  r.stream = stream;
  const GenerateResult kept = server.gateway().generate(r);
  REQUIRE(kept.path.size() == 1);
  CHECK(kept.model == "q4");
  CHECK(kept.tokens == direct(server, "q4", "The cat", 30).tokens);
  std::vector<int32_t> streamed;
  for (const auto& t : stream->wait(0, std::chrono::milliseconds(0)).tokens) streamed.push_back(t.token);
  CHECK(streamed == kept.tokens);  // the client's stream got every token once
}

TEST_CASE("groups: the response cache answers a repeat byte for byte and never across parameters or namespaces", "[server][groups][cache]") {
  Server server(read_deployment("cache.toml", group_manifest("plugin = \"router.cascade\"\nconfig = { threshold = -1.5, cache = true }")));
  auto req = [&](const std::string& prompt) { return ask(server, "stories", prompt, 20); };
  const GenerateResult first = server.gateway().generate(req("Once upon a time"));
  REQUIRE(first.finish_reason == "length");
  CHECK_FALSE(first.cached);
  const GenerateResult again = server.gateway().generate(req("Once upon a time"));
  CHECK(again.cached);
  CHECK(again.tokens == first.tokens);
  CHECK(again.finish_reason == first.finish_reason);
  CHECK(again.path.empty());
  // Any change misses: the prompt, max_tokens, a sampling parameter, the API key, the cache_salt.
  auto misses = [&](GenerateRequest r) { return !server.gateway().generate(std::move(r)).cached; };
  CHECK(misses(req("Once upon a time!")));
  GenerateRequest longer = req("Once upon a time");
  longer.max_tokens = 21;
  CHECK(misses(longer));
  GenerateRequest penalised = req("Once upon a time");
  penalised.sampling.repetition_penalty = 1.1f;
  CHECK(misses(penalised));
  GenerateRequest other_key = req("Once upon a time");
  other_key.api_key = "another-client";
  CHECK(misses(other_key));
  GenerateRequest salted = req("Once upon a time");
  salted.cache_salt = "s";
  CHECK(misses(salted));
  // Sampled without a fixed seed: never from the cache, even when repeated.
  GenerateRequest sampled = req("Once upon a time");
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 7;
  CHECK(misses(sampled));
  CHECK(misses(sampled));
  // A fixed seed is deterministic: its repeat is a hit.
  sampled.seeded = true;
  CHECK(misses(sampled));
  CHECK_FALSE(misses(sampled));
  CHECK(metric_sum(server, "tokenhost_router_answers_total", "cached", "how") == Approx(2));
}

TEST_CASE("groups: an ensemble keeps one member's answer and pays for every answer", "[server][groups]") {
  Server server(read_deployment("vote.toml", group_manifest("plugin = \"router.vote\"\nconfig = { rule = \"mean_logprob\" }")));
  for (const auto& p : {"Once upon a time", "The cat", "Lily wanted"}) {
    const GenerateResult small = direct(server, "q4", p, 16), large = direct(server, "full", p, 16);
    const GenerateResult got = server.gateway().generate(ask(server, "stories", p, 16));
    INFO(p << ": " << got.error);
    REQUIRE(got.path.size() == 2);
    const bool large_wins = mean_logprob(large) > mean_logprob(small);
    CHECK(got.tokens == (large_wins ? large.tokens : small.tokens));
    CHECK(got.model == (large_wins ? "full" : "q4"));
    const size_t prompt = server.gateway().find_model("stories")->encode(p, true, false).size();
    CHECK(got.cost == Approx((0.3 * double(prompt + small.tokens.size()) + 1.0 * double(prompt + large.tokens.size())) / 1e6));
  }
}

TEST_CASE("groups: routers swap under load and no request is lost", "[server][groups]") {
  Server server(read_deployment("swap.toml", group_manifest("plugin = \"router.cascade\"\nconfig = { threshold = -1.2, cache = true }")));
  std::atomic<int> failed{0}, done{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < 12; ++i) {
        GenerateRequest r = ask(server, "stories", kPrompts[size_t(c * 3 + i) % kPrompts.size()], 48);
        r.stream = std::make_shared<TokenStream>();
        const GenerateResult g = server.gateway().generate(r);
        if (g.finish_reason != "length" && g.finish_reason != "stop") ++failed;
        ++done;
      }
    });
  const char* routers[] = {"router.vote", "router.round_robin", "router.cache", "router.cascade"};
  int swaps_under_load = 0;
  for (int k = 0; done < 48 && k < 400; ++k) {
    server.set_slot("", "router", routers[k % 4], {});
    swaps_under_load += done < 48 ? 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& t : clients) t.join();
  CHECK(swaps_under_load >= 4);
  CHECK(done == 48);
  CHECK(failed == 0);
}

TEST_CASE("groups: the manifest's groups are checked and listed by their public name", "[server][groups][manifest]") {
  auto refused = [](const std::string& groups) {
    try {
      const std::string text = group_manifest("plugin = \"router.round_robin\"");
      read_deployment("bad.toml", text.substr(0, text.find("[groups.stories]")) + groups + text.substr(text.find("[engines.small]")));
    } catch (const ManifestError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(refused("[groups.full]\nmembers = [{ model = \"q4\" }]\n"), Contains("has the name of a model"));
  CHECK_THAT(refused("[groups.g]\nmembers = [{ model = \"q5\" }]\n"), Contains("model 'q5' of [groups.g] is not in [models]"));
  CHECK_THAT(refused("[groups.g]\nmembers = [{ model = \"q4\" }, { model = \"q4\" }]\n"), Contains("listed twice"));
  CHECK_THAT(refused("[groups.g]\nmembers = [{ model = \"q4\", cost = 0 }]\n"), Contains("'cost' in a member of [groups.g] must be a number above 0"));
  CHECK_THAT(refused("[groups.g]\nmembers = []\n"), Contains("non-empty array"));
  CHECK_THAT(refused("[groups.g]\nmodels = [\"q4\"]\n"), Contains("unknown key 'models' in [groups.g]"));
  // Members that do not share a tokenizer: refused when the server loads them.
  const std::string mixed = group_manifest("plugin = \"router.round_robin\"", R"(
[models.synthetic]
dim = 64
n_layers = 1
vocab_size = 512

[groups.mixed]
members = [{ model = "full" }, { model = "synthetic" }]

[engines.syn]
model = "synthetic"
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 16, n_blocks = 64 } }
scheduler = { plugin = "scheduler.continuous" }
)");
  CHECK_THROWS_WITH(Server(read_deployment("mixed.toml", mixed)), Contains("do not share a tokenizer"));
  Server server(read_deployment("ok.toml", group_manifest("plugin = \"router.round_robin\"")));
  std::vector<std::string> listed;
  for (const auto& m : server.gateway().models())
    if (m.listed) listed.push_back(m.name);
  CHECK(listed == std::vector<std::string>{"stories"});
  REQUIRE(server.gateway().find_model("q4") != nullptr);  // a member still answers by its name
  CHECK(server.gateway().find_model("stories")->members == std::vector<std::string>{"q4", "full"});
}

TEST_CASE("groups: manifests/cascade.toml serves as it is", "[server][groups]") {
  std::ifstream in(std::string(TOKENHOST_SOURCE_DIR) + "/manifests/cascade.toml");
  std::stringstream text;
  text << in.rdbuf();
  std::string manifest = text.str();
  // Its own ports may be taken on a test machine: any free ones.
  for (const char* port : {"127.0.0.1:8080", "127.0.0.1:8081"}) manifest.replace(manifest.find(port), std::strlen(port), "127.0.0.1:0");
  Deployment d = read_deployment(std::string(TOKENHOST_SOURCE_DIR) + "/manifests/cascade.toml", manifest);
  Server server(std::move(d));
  const GenerateResult g = server.gateway().generate(ask(server, "stories", "Once upon a time", 16));
  CHECK(g.finish_reason == "length");
  REQUIRE_FALSE(g.path.empty());
  CHECK(g.path[0].model == "q4");
  CHECK(server.gateway().generate(ask(server, "stories", "Once upon a time", 16)).cached);
}

TEST_CASE("groups: over HTTP, the response names the model that answered and the path, and /v1/models lists the group", "[server][groups][http]") {
  LiveServer live(group_manifest("plugin = \"router.cascade\"\nconfig = { threshold = -1.2, cache = true }"));
  HttpClientRequest models;
  models.method = "GET";
  models.target = "/v1/models";
  auto listed = live.client().request(models);
  REQUIRE(listed.ok());
  const auto cards = nlohmann::json::parse(listed.body)["data"];
  REQUIRE(cards.size() == 1);
  CHECK(cards[0]["id"] == "stories");
  const nlohmann::json body = {{"model", "stories"}, {"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}};
  const Answer a = post(live, "/v1/completions", body.dump());
  REQUIRE(a.status == 200);
  const auto& route = a.body["tokenhost"]["choices"][0];
  CHECK(a.body["tokenhost"]["model"] == "stories");
  CHECK(a.body["model"] == route["model"]);
  CHECK((route["model"] == "q4" || route["model"] == "full"));
  CHECK(route["path"][0]["model"] == "q4");
  CHECK(route["path"].back()["outcome"] == "answered");
  CHECK(route["cached"] == false);
  // The repeat comes from the cache, byte for byte; streamed, it is the same text.
  const Answer again = post(live, "/v1/completions", body.dump());
  CHECK(again.body["tokenhost"]["choices"][0]["cached"] == true);
  CHECK(again.body["choices"][0]["text"] == a.body["choices"][0]["text"]);
  const Streamed st = stream(live, "/v1/completions", body);
  CHECK(st.done);
  CHECK(st.text == a.body["choices"][0]["text"].get<std::string>());
  // A model outside the group answers without the object.
  const Answer plain = post(live, "/v1/completions", nlohmann::json{{"model", "full"}, {"prompt", "Hi"}, {"max_tokens", 4}}.dump());
  CHECK(plain.body["model"] == "full");
  CHECK_FALSE(plain.body.contains("tokenhost"));
}

TEST_CASE("groups: an A/B experiment between router configurations splits and reports like an engine one", "[server][groups][experiments]") {
  Server server(read_deployment("ab.toml", group_manifest("plugin = \"router.round_robin\"", R"(
[experiments.thresholds]
model = "stories"
sticky_key = "none"
min_samples = 5
arms = [
  { name = "keep", router = "router.cascade", config = { threshold = -1000.0 }, percent = 50 },
  { name = "escalate", router = "router.cascade", config = { threshold = 0.0, cache = true }, percent = 50 },
]
)")));
  std::map<std::string, int> by_model;
  for (int i = 0; i < 40; ++i) {
    const GenerateResult g = server.gateway().generate(ask(server, "stories", kPrompts[size_t(i) % 4], 12));
    REQUIRE(g.finish_reason == "length");
    ++by_model[g.cached ? "cache" : g.model];
    // Each arm's router planned its requests: "keep" never escalates, "escalate" always does.
    if (!g.cached) CHECK(g.path.size() == (g.model == "q4" ? 1u : 2u));
  }
  const nlohmann::json report = server.experiment_report("thresholds");
  const auto& arms = report["arms"];
  REQUIRE(arms.size() == 2);
  CHECK(arms[0]["router"] == "router.cascade");
  CHECK(arms[1]["config"]["threshold"] == 0.0);
  CHECK(arms[0]["requests"].get<int>() + arms[1]["requests"].get<int>() == 40);
  CHECK(std::abs(arms[0]["requests"].get<int>() - 20) <= 2);  // a keyless split follows the percentages within a request or two
  CHECK(by_model["q4"] == arms[0]["requests"].get<int>());
  // The escalating arm's repeated prompts come from its cache: counted apart, out of the latency samples.
  const int cached = arms[1]["cached"].get<int>();
  CHECK(cached == by_model["cache"]);
  CHECK(cached >= 10);
  CHECK(arms[1]["e2e_s"]["n"].get<int>() == arms[1]["requests"].get<int>() - cached);
  // Per generated answer, keeping the small model costs 0.3 of the tokens, escalating 1.3.
  const double keep = arms[0]["cost"].get<double>() / arms[0]["requests"].get<double>();
  const double escalate = arms[1]["cost"].get<double>() / double(arms[1]["requests"].get<int>() - cached);
  CHECK(keep / escalate == Approx(0.3 / 1.3).epsilon(0.05));
  // Stopped, its report stays readable.
  server.stop_experiment("thresholds");
  CHECK(server.experiment_report("thresholds")["arms"][1]["cached"].get<int>() == cached);
  // Through the admin API's JSON: a router arm that does not load, or a model not served, is refused.
  auto refused = [&](const nlohmann::json& body) {
    try {
      server.start_experiment(body);
    } catch (const AdminError& e) {
      return std::string(e.what());
    }
    return std::string("started");
  };
  nlohmann::json body = {{"name", "x"}, {"model", "stories"}, {"sticky_key", "none"},
                         {"arms", {{{"name", "a"}, {"router", "router.cascade"}, {"percent", 50}},
                                   {{"name", "b"}, {"router", "router.cascade"}, {"config", {{"threshold", "high"}}}, {"percent", 50}}}}};
  CHECK_THAT(refused(body), Contains("arms[1].config") && Contains("threshold"));
  body["arms"][1]["config"] = {{"threshold", -0.5}};
  body["model"] = "nothing";
  CHECK_THAT(refused(body), Contains("no model or group 'nothing'"));
  body["model"] = "stories";
  body["arms"][1]["router"] = "router.none";
  CHECK_THAT(refused(body), Contains("arms[1].router"));
  body["arms"][1] = {{"name", "b"}, {"engine", "large"}, {"percent", 50}};
  CHECK_THAT(refused(body), Contains("all engines or all routers"));
  body.erase("model");
  body["arms"][0] = {{"name", "a"}, {"router", "router.cascade"}, {"percent", 50}};
  body["arms"][1] = {{"name", "b"}, {"router", "router.vote"}, {"percent", 50}};
  CHECK_THAT(refused(body), Contains("names the model"));
  body["model"] = "stories";
  CHECK(refused(body) == "started");
  CHECK(server.experiments()["experiments"].size() == 2);
}

TEST_CASE("groups: a router written in C against ABI 1.7 plans cascades, escalates and reads the feedback's cost", "[server][groups][abi]") {
  // tests/fixtures/fixture_plugin.c as a router: over a group, cheapest model first, escalating below
  // a mean log-probability of -0.7, with no SDK helper; router.cascade at the same threshold is the
  // reference. Built against the frozen 1.7 headers (the ABI matrix's) and the current ones.
  const auto [manifest, id] = GENERATE(std::make_pair(fixture_dir() + "/abi_1_7/router/plugin.toml", std::string("router.abi_1_7 1.0.0")),
                                       std::make_pair(fixture("router_v1"), std::string("router.fixture 1.0.0")));
  const std::string plugin = id.substr(0, id.find(' '));
  Server server(read_deployment("c.toml", group_manifest("plugin = \"router.cascade\"\nconfig = { threshold = -0.7 }")));
  std::vector<GenerateResult> want;
  for (const auto& p : kPrompts) want.push_back(server.gateway().generate(ask(server, "stories", p, 24)));
  REQUIRE_THAT(server.set_slot("", "router", server.register_plugin(manifest), {}), Contains(id));
  size_t escalated = 0;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const GenerateResult got = server.gateway().generate(ask(server, "stories", kPrompts[i], 24));
    INFO(plugin << ", " << kPrompts[i] << ": " << got.error);
    CHECK(got.tokens == want[i].tokens);
    CHECK(got.model == want[i].model);
    CHECK(got.path.size() == want[i].path.size());
    escalated += got.path.size() == 2;
  }
  CHECK(escalated > 0);
  CHECK(escalated < kPrompts.size());
  CHECK(metric_sum(server, "tokenhost_plugin_fixture_feedback_cost", plugin) > 0);
  const double stages = metric_sum(server, "tokenhost_plugin_fixture_feedback_stages", plugin);
  CHECK((stages == 1 || stages == 2));
}

}  // namespace server_model_groups_tests
