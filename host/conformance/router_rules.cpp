// router rules: answers name a candidate, a healthy one when there is one, and two instances given the
// same requests answer alike; a cascade's escalate() and an ensemble's select() answer within their
// ranges; no answer is given from a cache to a request that is not deterministic or to another
// namespace (API key, cache_salt) than the one it was given in; a request as a host before 1.8 sends it
// (no candidate nodes) is answered as validly as one with them; a disaggregation (ABI 1.9, candidates
// carry random roles) names two different engines of one model.
#include <optional>

#include "conformance/conformance.hpp"

namespace tokenhost::conformance {
namespace {

struct Request {
  std::vector<std::string> names;
  std::vector<th_route_candidate> candidates;
  std::vector<int32_t> tokens;
  std::vector<uint32_t> cached;  // ABI 1.5: per candidate, whole blocks of 16 short of the last token
  std::vector<const char*> nodes;  // ABI 1.8: per candidate, "" (this process) or a node's name
  std::vector<double> rtt;         // ABI 1.8: 0 for "", else -1 (not yet measured) or a round trip
  std::vector<th_engine_role> roles;  // ABI 1.9: per candidate, both, prefill or decode
  th_route_request request{};
};

// A group's models as the candidates show them (ABI 1.7): name, cost, quality.
struct GroupModel {
  const char* name;
  double cost, quality;
};
constexpr GroupModel kModels[] = {{"small", 0.25, 0.8}, {"medium", 0.5, 0.9}, {"large", 1.0, 1.0}};

void random_request(Rng& rng, uint64_t id, Request& q) {
  const uint32_t n = uniform(rng, 1, 8);
  q.names.clear();
  for (uint32_t i = 0; i < n; ++i) q.names.push_back("engine" + std::to_string(i));
  q.candidates.clear();
  const uint32_t healthy = uniform(rng, 0, n - 1);
  for (uint32_t i = 0; i < n; ++i) {
    th_route_candidate c{};
    c.engine_id = q.names[i].c_str();
    const GroupModel& m = kModels[uniform(rng, 0, 2)];
    c.model = m.name;
    c.running = uniform(rng, 0, 64);
    c.load = double(c.running) / 64.0;
    c.cost_per_mtok = m.cost;
    c.quality = m.quality;
    c.healthy = i == healthy || uniform(rng, 0, 1) ? 1 : 0;
    q.candidates.push_back(c);
  }
  q.tokens.assign(uniform(rng, 1, 80), 0);
  for (auto& t : q.tokens) t = int32_t(uniform(rng, 0, 255));
  q.request = th_route_request{};
  q.request.struct_size = sizeof q.request;
  q.request.request_id = id;
  q.request.model = "group";
  q.request.prompt = "";
  q.request.tokens = q.tokens.data();
  q.request.n_tokens = uint32_t(q.tokens.size());
  q.request.session_key = id % 3 == 0 ? "session-a" : "";
  q.request.candidates = q.candidates.data();
  q.request.n_candidates = n;
  q.cached.assign(n, 0);
  for (auto& c : q.cached) c = uniform(rng, 0, 1) ? uniform(rng, 0, uint32_t(q.tokens.size() - 1)) / 16 * 16 : 0;
  q.request.cached_tokens = q.cached.data();
  q.request.max_tokens = uniform(rng, 1, 64);
  q.request.cache_namespace = uniform(rng, 1, 3);
  q.request.params_key = uniform(rng, 1, 2);
  q.request.deterministic = uniform(rng, 0, 1);
  q.request.request_class = "";
  q.request.payer = "";
  static const char* const kNodes[] = {"", "worker-1", "worker-2"};
  q.nodes.clear();
  q.rtt.clear();
  for (uint32_t i = 0; i < n; ++i) {
    q.nodes.push_back(kNodes[uniform(rng, 0, 2)]);
    q.rtt.push_back(*q.nodes.back() == '\0' ? 0.0 : uniform(rng, 0, 4) == 0 ? -1.0 : double(uniform(rng, 50, 50000)) / 1e6);
  }
  q.request.candidate_nodes = q.nodes.data();
  q.request.candidate_rtt_s = q.rtt.data();
  q.roles.clear();
  for (uint32_t i = 0; i < n; ++i) q.roles.push_back(th_engine_role(uniform(rng, 0, 2)));
  q.request.candidate_roles = q.roles.data();
}

// An answer of `n` tokens for q, as the host tells it in feedback.
void tell(PluginInstance& inst, const Request& q, const std::vector<int32_t>& out) {
  th_route_feedback f{};
  f.struct_size = sizeof f;
  f.request_id = q.request.request_id;
  f.engine_id = q.names[0].c_str();
  f.ok = 1;
  f.tokens_in = q.request.n_tokens;
  f.tokens_out = uint32_t(out.size());
  f.prompt_tokens = q.request.tokens;
  f.n_prompt_tokens = q.request.n_tokens;
  f.output_tokens = out.data();
  f.stop = TH_STOP_EOS;
  f.cache_namespace = q.request.cache_namespace;
  f.params_key = q.request.params_key;
  f.deterministic = q.request.deterministic;
  f.stages = 1;
  inst.call(&th_router_vtable::feedback, "feedback", inst.handle(), &f);
}

// The candidate index the decision serves first (nullopt: answered from a cache); fails the rule when
// the decision is not servable.
std::optional<uint32_t> route(PluginInstance& inst, const Request& q) {
  std::vector<uint32_t> cascade(q.candidates.size());
  th_route_decision d{};
  d.struct_size = sizeof d;
  d.cascade = cascade.data();
  th_error err;
  const th_status st = inst.call(&th_router_vtable::route, "route", inst.handle(), &q.request, &d, &err);
  expect(st == TH_OK, "route() returned " + std::to_string(st) + ": " + err.text());
  const uint32_t n = uint32_t(q.candidates.size());
  if (d.action == TH_ROUTE_CASCADE || d.action == TH_ROUTE_ENSEMBLE) {
    expect(d.n_cascade >= 1 && d.n_cascade <= n, "a list of " + std::to_string(d.n_cascade) + " among " + std::to_string(n) + " candidates");
    std::vector<bool> seen(n, false);
    for (uint32_t i = 0; i < d.n_cascade; ++i) {
      expect(cascade[i] < n, "list entry " + std::to_string(cascade[i]) + " of " + std::to_string(n) + " candidates");
      expect(!seen[cascade[i]], "candidate " + std::to_string(cascade[i]) + " listed twice");
      seen[cascade[i]] = true;
    }
    if (d.action == TH_ROUTE_ENSEMBLE) expect(d.n_samples <= 8, std::to_string(d.n_samples) + " samples per candidate (at most 8)");
    return cascade[0];
  }
  if (d.action == TH_ROUTE_DISAGGREGATE) {  // ABI 1.9: a prefill and a decode engine of one model
    expect(d.n_cascade == 2, "disaggregation over " + std::to_string(d.n_cascade) + " candidates (2: prefill, decode)");
    expect(cascade[0] < n && cascade[1] < n && cascade[0] != cascade[1],
           "disaggregation over candidates " + std::to_string(cascade[0]) + " and " + std::to_string(cascade[1]) + " of " + std::to_string(n));
    expect(std::string(q.candidates[cascade[0]].model) == q.candidates[cascade[1]].model,
           "disaggregation over engines of two models (" + std::string(q.candidates[cascade[0]].model) + ", " +
               q.candidates[cascade[1]].model + ")");
    return cascade[0];
  }
  if (d.action == TH_ROUTE_CACHED) {
    expect(q.request.deterministic != 0, "an answer from a cache for a request that is not deterministic");
    expect(d.n_cached_tokens <= q.request.max_tokens, "a cached answer longer than max_tokens");
    expect(d.cached_stop == TH_STOP_EOS || d.cached_stop == TH_STOP_LENGTH, "a cached answer with cached_stop " + std::to_string(d.cached_stop));
    return std::nullopt;
  }
  expect(d.action == TH_ROUTE_TARGET, "action " + std::to_string(d.action) + " (none the host serves)");
  expect(d.target < n, "target " + std::to_string(d.target) + " of " + std::to_string(n) + " candidates");
  return d.target;
}

// Calls check(stage) with a random stage of a cascade and its signal.
template <class Check>
void routing_signal_case(Rng& rng, Check check) {
  std::vector<int32_t> tokens(uniform(rng, 0, 40));
  for (auto& t : tokens) t = int32_t(uniform(rng, 0, 255));
  th_route_signal sig{};
  sig.struct_size = sizeof sig;
  sig.n_tokens = uint32_t(tokens.size());
  if (!tokens.empty()) {
    sig.min_logprob = -double(uniform(rng, 0, 2000)) / 100.0;
    sig.mean_logprob = sig.min_logprob * double(uniform(rng, 0, 100)) / 100.0;
    sig.max_entropy = double(uniform(rng, 0, 600)) / 100.0;
    sig.mean_entropy = sig.max_entropy * double(uniform(rng, 0, 100)) / 100.0;
  }
  static const int32_t stops[] = {TH_STOP_NONE, TH_STOP_EOS, TH_STOP_LENGTH};
  sig.stop = stops[uniform(rng, 0, 2)];
  th_route_stage stage{};
  stage.struct_size = sizeof stage;
  stage.request_id = uniform(rng, 1, 1000);
  stage.n_stages = uniform(rng, 2, 3);
  stage.stage = uniform(rng, 0, stage.n_stages - 2);
  stage.candidate = 0;
  stage.engine_id = "engine0";
  stage.model = kModels[stage.stage].name;
  stage.cost_per_mtok = kModels[stage.stage].cost;
  stage.quality = kModels[stage.stage].quality;
  stage.tokens = tokens.data();
  stage.signal = &sig;
  check(stage);
}

}  // namespace

void router_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r) {
  std::string why;
  const ModelSpec model = model_shape(4, 2, 16, TH_DTYPE_F16);
  auto a = instance_for(catalog, plugin, model, why);
  if (!a) {
    for (const char* rule : {"router.target_valid", "router.prefers_healthy", "router.deterministic", "router.escalate_verdicts",
                             "router.select_valid", "router.cache_namespaces", "router.without_nodes"})
      r.not_applicable(rule, "check() refuses the model: " + why);
    return;
  }
  auto b = instance_for(catalog, plugin, model, why);
  std::vector<Request> requests(20 * o.rounds);
  for (size_t i = 0; i < requests.size(); ++i) random_request(rng, i + 1, requests[i]);
  std::vector<std::optional<uint32_t>> answers;
  r.rule("router.target_valid", [&] {
    for (const auto& q : requests) answers.push_back(route(*a, q));
  });
  r.rule("router.prefers_healthy", [&] {
    expect(answers.size() == requests.size(), "router.target_valid failed first");
    for (size_t i = 0; i < requests.size(); ++i)
      if (answers[i])
        expect(requests[i].candidates[*answers[i]].healthy, "request " + std::to_string(i + 1) + " went to unhealthy candidate " +
                                                                std::to_string(*answers[i]) + " while a healthy one was offered");
  });
  r.rule("router.deterministic", [&] {
    expect(answers.size() == requests.size(), "router.target_valid failed first");
    for (size_t i = 0; i < requests.size(); ++i) {
      const auto again = route(*b, requests[i]);
      auto name = [](const std::optional<uint32_t>& c) { return c ? "candidate " + std::to_string(*c) : std::string("a cached answer"); };
      expect(again == answers[i], "request " + std::to_string(i + 1) + ": " + name(answers[i]) + " from one instance, " + name(again) +
                                      " from another given the same requests");
    }
  });
  const bool escalates = a->fn(&th_router_vtable::escalate) != nullptr;
  if (!escalates) r.not_applicable("router.escalate_verdicts", "the plugin has no escalate() (ABI 1.7, optional)");
  else r.rule("router.escalate_verdicts", [&] {
    for (uint32_t i = 0; i < 50 * o.rounds; ++i) {
      routing_signal_case(rng, [&](const th_route_stage& stage) {
        int32_t verdict = -1;
        th_error err;
        const th_status st = a->call(&th_router_vtable::escalate, "escalate", a->handle(), &stage, &verdict, &err);
        expect(st == TH_OK, "escalate() returned " + std::to_string(st) + ": " + err.text());
        expect(verdict == TH_STAGE_CONTINUE || verdict == TH_STAGE_ESCALATE || verdict == TH_STAGE_ACCEPT,
               "escalate() gave verdict " + std::to_string(verdict));
      });
    }
  });
  if (a->fn(&th_router_vtable::select) == nullptr) r.not_applicable("router.select_valid", "the plugin has no select() (ABI 1.7, optional)");
  else r.rule("router.select_valid", [&] {
    for (uint32_t i = 0; i < 50 * o.rounds; ++i) {
      const uint32_t n = uniform(rng, 1, 6);
      std::vector<th_route_signal> sigs(n);
      std::vector<std::vector<int32_t>> tokens(n);
      std::vector<std::string> texts(n);
      std::vector<th_route_answer> answers(n);
      uint32_t failed = 0;
      for (uint32_t k = 0; k < n; ++k) {
        sigs[k] = th_route_signal{sizeof(th_route_signal), uniform(rng, 0, 20), -double(uniform(rng, 0, 500)) / 100.0, -double(uniform(rng, 0, 900)) / 100.0,
                                  double(uniform(rng, 0, 300)) / 100.0, double(uniform(rng, 0, 600)) / 100.0, TH_STOP_EOS};
        if (k + 1 < n && uniform(rng, 0, 3) == 0) {
          sigs[k].stop = TH_STOP_ERROR;
          ++failed;
        }
        tokens[k].assign(sigs[k].n_tokens, 0);
        for (auto& t : tokens[k]) t = int32_t(uniform(rng, 0, 3));
        texts[k] = std::string(uniform(rng, 0, 2), 'a' + char(uniform(rng, 0, 1)));
        answers[k] = {sizeof(th_route_answer), k, "engine", kModels[k % 3].name, tokens[k].data(), uint32_t(tokens[k].size()), texts[k].data(),
                      texts[k].size(), &sigs[k]};
      }
      th_route_ensemble e{sizeof e, uint64_t(i + 1), answers.data(), n};
      uint32_t chosen = n;
      th_error err;
      const th_status st = a->call(&th_router_vtable::select, "select", a->handle(), &e, &chosen, &err);
      expect(st == TH_OK, "select() returned " + std::to_string(st) + ": " + err.text() + " with " + std::to_string(n - failed) + " good answers");
      expect(chosen < n, "select() chose answer " + std::to_string(chosen) + " of " + std::to_string(n));
      expect(sigs[chosen].stop != TH_STOP_ERROR, "select() chose failed answer " + std::to_string(chosen));
    }
  });
  r.rule("router.without_nodes", [&] {
    // A 1.7 host's request ends at payer: a router must not read candidate_nodes or candidate_rtt_s
    // past struct_size (they are NULL here; reading them faults).
    auto c = instance_for(catalog, plugin, model, why);
    expect(c != nullptr, "a third instance: " + why);
    for (uint32_t i = 0; i < 20 * o.rounds; ++i) {
      Request q;
      random_request(rng, 2000 + uint64_t(i), q);
      q.request.struct_size = uint32_t(TH_SIZE_THROUGH(th_route_request, payer));
      q.request.candidate_nodes = nullptr;
      q.request.candidate_rtt_s = nullptr;
      route(*c, q);
    }
  });
  r.rule("router.cache_namespaces", [&] {
    auto c = instance_for(catalog, plugin, model, why);
    expect(c != nullptr, "a third instance: " + why);
    if (c->fn(&th_router_vtable::feedback) == nullptr) return;  // it hears of no answer: it can keep none
    for (uint32_t i = 0; i < 20 * o.rounds; ++i) {
      Request q;
      random_request(rng, 1000 + uint64_t(i), q);
      for (auto& cand : q.candidates) cand.healthy = 1;
      q.request.deterministic = 1;
      tell(*c, q, std::vector<int32_t>(std::min<uint32_t>(q.request.max_tokens, 5), 7));
      // The same prompt and parameters from another namespace, or not deterministic: never cached.
      q.request.cache_namespace += 100;
      expect(route(*c, q).has_value(), "an answer given in one cache namespace was served in another");
      q.request.cache_namespace -= 100;
      q.request.deterministic = 0;
      expect(route(*c, q).has_value(), "an answer was served from a cache to a request that is not deterministic");
    }
  });
}

}  // namespace tokenhost::conformance
