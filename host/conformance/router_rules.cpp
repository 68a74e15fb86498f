// router rules: answers name a candidate, a healthy one when there is one, and two instances given the
// same requests answer alike.
#include "conformance/conformance.hpp"

namespace tokenhost::conformance {
namespace {

struct Request {
  std::vector<std::string> names;
  std::vector<th_route_candidate> candidates;
  std::vector<int32_t> tokens;
  std::vector<uint32_t> cached;  // ABI 1.5: per candidate, whole blocks of 16 short of the last token
  th_route_request request{};
};

void random_request(Rng& rng, uint64_t id, Request& q) {
  const uint32_t n = uniform(rng, 1, 8);
  q.names.clear();
  for (uint32_t i = 0; i < n; ++i) q.names.push_back("engine" + std::to_string(i));
  q.candidates.clear();
  const uint32_t healthy = uniform(rng, 0, n - 1);
  for (uint32_t i = 0; i < n; ++i) {
    th_route_candidate c{};
    c.engine_id = q.names[i].c_str();
    c.model = "conformance";
    c.running = uniform(rng, 0, 64);
    c.load = double(c.running) / 64.0;
    c.cost_per_mtok = 1.0;
    c.quality = 1.0;
    c.healthy = i == healthy || uniform(rng, 0, 1) ? 1 : 0;
    q.candidates.push_back(c);
  }
  q.tokens.assign(uniform(rng, 1, 80), 0);
  for (auto& t : q.tokens) t = int32_t(uniform(rng, 0, 255));
  q.request = th_route_request{};
  q.request.struct_size = sizeof q.request;
  q.request.request_id = id;
  q.request.model = "conformance";
  q.request.prompt = "";
  q.request.tokens = q.tokens.data();
  q.request.n_tokens = uint32_t(q.tokens.size());
  q.request.session_key = id % 3 == 0 ? "session-a" : "";
  q.request.candidates = q.candidates.data();
  q.request.n_candidates = n;
  q.cached.assign(n, 0);
  for (auto& c : q.cached) c = uniform(rng, 0, 1) ? uniform(rng, 0, uint32_t(q.tokens.size() - 1)) / 16 * 16 : 0;
  q.request.cached_tokens = q.cached.data();
}

// The candidate index the decision serves; fails the rule when the decision is not servable.
uint32_t route(PluginInstance& inst, const Request& q) {
  std::vector<uint32_t> cascade(q.candidates.size());
  th_route_decision d{};
  d.struct_size = sizeof d;
  d.cascade = cascade.data();
  th_error err;
  const th_status st = inst.call(&th_router_vtable::route, "route", inst.handle(), &q.request, &d, &err);
  expect(st == TH_OK, "route() returned " + std::to_string(st) + ": " + err.text());
  const uint32_t n = uint32_t(q.candidates.size());
  if (d.action == TH_ROUTE_CASCADE) {
    expect(d.n_cascade >= 1 && d.n_cascade <= n, "a cascade of " + std::to_string(d.n_cascade) + " among " + std::to_string(n) + " candidates");
    for (uint32_t i = 0; i < d.n_cascade; ++i)
      expect(cascade[i] < n, "cascade entry " + std::to_string(cascade[i]) + " of " + std::to_string(n) + " candidates");
    return cascade[0];
  }
  expect(d.action == TH_ROUTE_TARGET, "action " + std::to_string(d.action) + " (the host serves TARGET and CASCADE)");
  expect(d.target < n, "target " + std::to_string(d.target) + " of " + std::to_string(n) + " candidates");
  return d.target;
}

}  // namespace

void router_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r) {
  std::string why;
  const ModelSpec model = model_shape(4, 2, 16, TH_DTYPE_F16);
  auto a = instance_for(catalog, plugin, model, why);
  if (!a) {
    for (const char* rule : {"router.target_valid", "router.prefers_healthy", "router.deterministic"})
      r.not_applicable(rule, "check() refuses the model: " + why);
    return;
  }
  auto b = instance_for(catalog, plugin, model, why);
  std::vector<Request> requests(20 * o.rounds);
  for (size_t i = 0; i < requests.size(); ++i) random_request(rng, i + 1, requests[i]);
  std::vector<uint32_t> answers;
  r.rule("router.target_valid", [&] {
    for (const auto& q : requests) answers.push_back(route(*a, q));
  });
  r.rule("router.prefers_healthy", [&] {
    expect(answers.size() == requests.size(), "router.target_valid failed first");
    for (size_t i = 0; i < requests.size(); ++i)
      expect(requests[i].candidates[answers[i]].healthy, "request " + std::to_string(i + 1) + " went to unhealthy candidate " +
                                                             std::to_string(answers[i]) + " while a healthy one was offered");
  });
  r.rule("router.deterministic", [&] {
    expect(answers.size() == requests.size(), "router.target_valid failed first");
    for (size_t i = 0; i < requests.size(); ++i) {
      const uint32_t again = route(*b, requests[i]);
      expect(again == answers[i], "request " + std::to_string(i + 1) + ": candidate " + std::to_string(answers[i]) +
                                      " from one instance, " + std::to_string(again) + " from another given the same requests");
    }
  });
}

}  // namespace tokenhost::conformance
