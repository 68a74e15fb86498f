// The head at fleet scale, simulated in one process (issue 31): its router actor with 1, 10, 100 and
// 1,000 candidate engines, and its status with that many remote engines. The candidates are stand-in
// engine actors that answer at once (one token), so a request's round trip through the router is the
// router's own work plus CAF's messaging; the growth from 1 candidate is what choosing among more
// costs. Each candidate has a prefix summary (of a 1,024-block pool) holding 256 block keys, none of
// the requests' (the worst case: every summary is searched), and each request has a 256-token prompt.
// Status: RemoteEngine::status() for each engine, as `tokenhost admin status` runs it (the engine
// proxies are real; their node is never reached). Alternating the sizes' order every run; medians.
// The decision column is the router's own measure of its choice (status decision_us: the A/B split, the
// guards, the router plugin, the checks), the median of the run's latest 1,024 requests.
//
//   bench_cluster_scale [--candidates 1,10,100,1000] [--routers router.round_robin,router.prefix_affinity]
//                       [--requests 4000] [--runs 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "actors/router.hpp"
#include "cluster/engine_proxy.hpp"
#include "plugin/catalog.hpp"
#include "runtime/prefix_summary.hpp"
#include "server/remote_engine.hpp"

using namespace tokenhost;
using Clock = std::chrono::steady_clock;

namespace {

engine_actor::behavior_type instant_engine(engine_actor::pointer self, std::string name) {
  return {
      [=](generate_atom, GenerateRequest) -> GenerateResult {
        GenerateResult r;
        r.tokens = {1};
        r.finish_reason = "length";
        r.engine = name;
        return r;
      },
      [=](swap_atom, SlotSwap) -> SwapResult { return {false, "stand-in"}; },
      [=](status_atom, const std::string&) -> StatusJson { return {"{}"}; },
      [=](cancel_atom, uint64_t) {},
      [=](drain_atom) {},
      [=](retire_atom) {},
      [=](tick_atom) {},
  };
}

ModelSpec spec() {
  ModelSpec m;
  m.name = "m";
  m.info.n_layers = 1;
  m.info.n_heads = m.info.n_kv_heads = 1;
  m.info.head_dim = m.info.dim = 16;
  m.info.ffn_dim = 64;
  m.info.vocab_size = 256;
  m.info.context_len = 4096;
  m.info.weight_dtype = m.info.act_dtype = m.info.kv_dtype = TH_DTYPE_F32;
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

struct RouteTimes {
  double round_trip_us = 0;  // per request, through the router and back
  double decision_us = 0;    // the router's own choice (its status' decision_us.p50, latest 1,024)
};

// Microseconds per request through a router over n stand-in engines, and the router's decision.
RouteTimes route_us(caf::actor_system& sys, PluginCatalog& catalog, const std::string& router_id, size_t n, size_t requests,
                bool summaries, std::mt19937_64& rng) {
  RouterInit init;
  init.router = instantiate(catalog, router_id, "bench", spec());
  for (size_t i = 0; i < n; ++i) {
    const std::string name = "main@worker-" + std::to_string(i);
    std::shared_ptr<PrefixSummary> summary;
    if (summaries) {
      summary = std::make_shared<PrefixSummary>(16, 1024);  // a 1,024-block pool, as the default manifest's
      std::vector<uint64_t> keys(256);
      for (auto& k : keys) k = rng();
      summary->add(keys.data(), keys.size());
    }
    init.engines.push_back({name, "m", sys.spawn(instant_engine, name), summary, nullptr});
  }
  auto router = spawn_router(sys, std::move(init));
  caf::scoped_actor self{sys};
  GenerateRequest req;
  req.model = "m";
  req.max_tokens = 1;
  req.prompt.resize(256);
  auto one = [&](uint64_t id) {
    req.id = id;
    for (auto& t : req.prompt) t = int32_t(rng() % 256);
    self->request(router, caf::infinite, generate_atom::value, req).receive([](GenerateResult&) {}, [](caf::error&) {});
  };
  for (uint64_t id = 1; id <= 200; ++id) one(id);  // warm-up
  const auto t0 = Clock::now();
  for (uint64_t id = 0; id < requests; ++id) one(1000 + id);
  RouteTimes t;
  t.round_trip_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(requests);
  self->request(router, caf::infinite, status_atom::value, std::string()).receive(
      [&](StatusJson& j) { t.decision_us = nlohmann::json::parse(j.json).at("decision_us").at("p50").get<double>(); },
      [](caf::error&) {});
  self->send_exit(router, caf::exit_reason::user_shutdown);
  return t;
}

// Milliseconds for the status of n remote engines, each asked in turn.
double status_ms(caf::actor_system& sys, size_t n) {
  std::vector<std::shared_ptr<RemoteEngine>> engines;
  for (size_t i = 0; i < n; ++i) {
    const std::string node = "worker-" + std::to_string(i);
    EngineDecl decl;
    decl.name = "main@" + node;
    decl.model = "m";
    decl.device = "cpu";
    decl.slots["attention"].plugin = "attention.cpu_flash";
    decl.slots["kvcache"].plugin = "kvcache.paged";
    decl.slots["scheduler"].plugin = "scheduler.continuous";
    auto proxy = cluster::spawn_engine_proxy(sys, {decl.name, "main", node, cluster::node_actor{}});
    engines.push_back(std::make_shared<RemoteEngine>(sys, decl, EngineFacts{}, node, "main", proxy, cluster::node_actor{}));
  }
  nlohmann::json all = nlohmann::json::array();
  const auto t0 = Clock::now();
  for (auto& e : engines) all.push_back(e->status());
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  for (auto& e : engines) e->stop();
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The head's router and status with many remote candidates, simulated in one process"};
  std::vector<size_t> sizes{1, 10, 100, 1000};
  std::vector<std::string> routers{"router.round_robin", "router.prefix_affinity"};
  size_t requests = 4000, runs = 3;
  bool no_summaries = false;
  app.add_option("--candidates", sizes, "Candidate counts")->delimiter(',');
  app.add_option("--routers", routers, "Router plugins")->delimiter(',');
  app.add_option("--requests", requests, "Requests per measurement");
  app.add_option("--runs", runs, "Runs (the sizes' order reversed every other run)");
  app.add_flag("--no-summaries", no_summaries, "Candidates without prefix summaries (engines that cache no prefixes)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  caf::actor_system_config cfg;
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  PluginCatalog catalog({TOKENHOST_PLUGIN_BUILD_DIR});
  catalog.scan();
  std::mt19937_64 rng(7);

  std::printf("| router | candidates | decision us (router's p50) | round trip us per request | round trip over 1 candidate |\n"
              "|---|---|---|---|---|\n");
  for (const auto& router : routers) {
    std::vector<std::vector<double>> us(sizes.size()), decided(sizes.size());
    for (size_t run = 0; run < runs; ++run)
      for (size_t k = 0; k < sizes.size(); ++k) {
        const size_t i = run % 2 == 0 ? k : sizes.size() - 1 - k;
        const RouteTimes t = route_us(sys, catalog, router, sizes[i], requests, !no_summaries, rng);
        us[i].push_back(t.round_trip_us);
        decided[i].push_back(t.decision_us);
      }
    const double base = median(us[0]);
    for (size_t i = 0; i < sizes.size(); ++i)
      std::printf("| %s | %zu | %.1f | %.1f | %+.1f |\n", router.c_str(), sizes[i], median(decided[i]), median(us[i]),
                  median(us[i]) - base);
  }
  std::printf("(medians of %zu runs)\n", runs);

  std::printf("\n| remote engines | status ms (median of %zu runs) | us per engine |\n|---|---|---|\n", runs);
  for (size_t n : sizes) {
    std::vector<double> ms;
    for (size_t run = 0; run < runs; ++run) ms.push_back(status_ms(sys, n));
    std::printf("| %zu | %.2f | %.1f |\n", n, median(ms), 1000.0 * median(ms) / double(n));
  }
  return 0;
}
