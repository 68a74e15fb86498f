// What the router does with its router plugin's answer (router_state.hpp): serve one engine, run a
// cascade whose cheaper stages escalate on the confidence signal, run an ensemble and keep one answer,
// or answer from the plugin's cache. Every plan ends in answer(): the client's result, the path it
// took, its cost, the plugin's feedback and the metrics.
#include <algorithm>
#include <variant>

#include <spdlog/spdlog.h>

#include "actors/router_state.hpp"
#include "plugin/plugin_fault.hpp"
#include "routing/route_keys.hpp"
#include "runtime/prefix_summary.hpp"

namespace tokenhost {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// An ensemble's bounds: answers per candidate, answers in all.
constexpr uint32_t kMaxEnsembleSamples = 8;
constexpr size_t kMaxEnsembleAnswers = 16;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The prompt's block keys for a block size (whole blocks short of the last token), made once per
// request and block size.
class PromptKeys {
 public:
  PromptKeys(const GenerateRequest& req, uint64_t ns) : req_(req), ns_(ns) {}
  const std::vector<uint64_t>& of(uint32_t block) {
    if (block == last_block_ && last_ != nullptr) return *last_;  // engines mostly share one block size
    auto [it, made] = by_block_.try_emplace(block);
    if (made && req_.prompt.size() >= 2) extend_prefix_block_keys(ns_, req_.prompt, uint32_t(req_.prompt.size() - 1), block, it->second);
    last_block_ = block;
    last_ = &it->second;
    return it->second;
  }

 private:
  const GenerateRequest& req_;
  const uint64_t ns_;
  std::map<uint32_t, std::vector<uint64_t>> by_block_;
  uint32_t last_block_ = 0;
  const std::vector<uint64_t>* last_ = nullptr;
};

// The prompt's leading tokens engine v likely holds in its prefix cache (th_route_request.cached_tokens):
// whole blocks its summary holds. The filter answers most engines (none of the first block) alone.
uint32_t cached_tokens(const CandidateView& v, PromptKeys& keys) {
  if (v.summary == nullptr) return 0;
  const auto& k = keys.of(v.block_size);
  if (k.empty() || !v.filter.may_hold(k[0])) return 0;
  return uint32_t(v.summary->leading_matches(k)) * v.block_size;
}

// Runs the router plugin over the engines that serve req's model (a group's members, with their
// declared figures) and the guards let it go to, and checks its decision; returns the plan, why the
// request fails, or the guards' refusal.
PlanOutcome plan_route(RouterState& s, const RouteJob& job) {
  const GenerateRequest& req = job.req;
  const auto group = s.groups.find(req.model);
  // For each model the engines serve: whether the request may go there, with its declared figures.
  static const RouteMember kPlain{};
  std::vector<const RouteMember*> serves(s.models.size(), nullptr);
  for (size_t m = 0; m < s.models.size(); ++m)
    if (group != s.groups.end()) {
      auto member = std::find_if(group->second.begin(), group->second.end(), [&](const RouteMember& g) { return g.model == s.models[m]; });
      if (member != group->second.end()) serves[m] = &*member;
    } else if (req.model.empty() || s.models[m] == req.model) {
      serves[m] = &kPlain;
    }
  PromptKeys keys(req, job.cache_namespace);
  std::vector<Eligible> eligible;
  eligible.reserve(s.views.size());
  // What the candidates' pass reads besides the views (the entry's load, the link's round trip, the
  // summary's first filter word) is asked of memory for every eligible engine as it is found, before
  // any is read, so that the loads overlap: with a thousand candidates, loaded one by one they would be
  // most of the choice.
  for (size_t i = 0; i < s.views.size(); ++i) {
    const CandidateView& v = s.views[i];
    const RouteMember* m = serves[v.model];
    if (m == nullptr) continue;
    eligible.push_back({i, m->cost, m->quality});
    __builtin_prefetch(&v.entry->in_flight);
    if (v.rtt != nullptr) __builtin_prefetch(v.rtt);
    if (v.summary != nullptr)
      if (const auto& k = keys.of(v.block_size); !k.empty()) v.filter.prefetch(k[0]);
  }
  if (eligible.empty())
    return s.engines.empty() ? std::string("no engine is serving") : "no engine serves model '" + req.model + "'";
  std::string degraded_class;
  if (auto refused = guard_candidates(s, job, eligible, degraded_class)) return *refused;
  std::vector<th_route_candidate> candidates;
  std::vector<uint32_t> cached;
  std::vector<size_t> engine_of;  // candidate index -> engine index
  std::vector<const char*> nodes;  // th_route_request.candidate_nodes
  std::vector<double> rtt;         // th_route_request.candidate_rtt_s
  std::vector<th_engine_role> roles;  // th_route_request.candidate_roles
  candidates.reserve(eligible.size());
  cached.reserve(eligible.size());
  engine_of.reserve(eligible.size());
  nodes.reserve(eligible.size());
  rtt.reserve(eligible.size());
  roles.reserve(eligible.size());
  for (const Eligible& c : eligible) {
    const CandidateView& v = s.views[c.engine];
    roles.push_back(v.role);
    const uint32_t in_flight = v.entry->in_flight;
    nodes.push_back(v.node);
    rtt.push_back(v.rtt != nullptr ? v.rtt->load(std::memory_order_relaxed) : 0.0);
    candidates.push_back({v.name, s.models[v.model].c_str(), in_flight, 0, std::min(1.0, in_flight / 64.0), c.cost, c.quality, 1});
    cached.push_back(cached_tokens(v, keys));
    engine_of.push_back(c.engine);
  }
  const uint32_t n = uint32_t(candidates.size());
  const std::string payer = routing::payer_id(req.api_key);
  th_route_request rr{};
  rr.struct_size = sizeof rr;
  rr.request_id = req.id;
  rr.model = req.model.c_str();
  rr.prompt = req.prompt_text.c_str();
  rr.prompt_len = req.prompt_text.size();
  rr.tokens = req.prompt.data();
  rr.n_tokens = uint32_t(req.prompt.size());
  rr.session_key = req.session_key.c_str();
  rr.candidates = candidates.data();
  rr.n_candidates = n;
  rr.cached_tokens = cached.data();
  rr.max_tokens = req.max_tokens;
  rr.cache_namespace = job.cache_namespace;
  rr.params_key = job.params_key;
  rr.deterministic = job.deterministic ? 1 : 0;
  rr.request_class = req.request_class.c_str();
  rr.payer = payer.c_str();
  rr.candidate_nodes = nodes.data();
  rr.candidate_rtt_s = rtt.data();
  rr.candidate_roles = roles.data();
  std::vector<uint32_t> cascade(n);
  th_route_decision d{};
  d.struct_size = sizeof d;
  d.cascade = cascade.data();
  th_error err;
  auto& r = *job.router;
  th_status st;
  try {
    st = r.call(&th_router_vtable::route, "route", r.handle(), &rr, &d, &err);
  } catch (const PluginFault& e) {
    return std::string(e.what());  // this request's error; the router serves the next one
  }
  if (st != TH_OK) return r.id() + " route() failed with " + status_name(st) + ": " + err.text();

  RoutePlan plan;
  plan.action = d.action;
  auto stage = [&](uint32_t i) { return PlanStage{s.engines[engine_of[i]], i, candidates[i].cost_per_mtok, candidates[i].quality}; };
  // The cascade or ensemble list: 1..n in-range indices, each once.
  auto listed = [&]() -> std::string {
    if (d.n_cascade == 0 || d.n_cascade > n)
      return r.id() + " listed " + std::to_string(d.n_cascade) + " candidates for action " + std::to_string(d.action) + " (of " +
             std::to_string(n) + ")";
    std::vector<bool> seen(n, false);
    for (uint32_t k = 0; k < d.n_cascade; ++k) {
      if (cascade[k] >= n) return r.id() + " listed candidate " + std::to_string(cascade[k]) + " of " + std::to_string(n);
      if (seen[cascade[k]]) return r.id() + " listed candidate " + std::to_string(cascade[k]) + " twice";
      seen[cascade[k]] = true;
    }
    return "";
  };
  switch (d.action) {
    case TH_ROUTE_TARGET:
      if (d.target >= n) return r.id() + " chose candidate " + std::to_string(d.target) + " of " + std::to_string(n);
      plan.stages.push_back(stage(d.target));
      break;
    case TH_ROUTE_CASCADE: {
      if (auto why = listed(); !why.empty()) return why;
      for (uint32_t k = 0; k < d.n_cascade; ++k) plan.stages.push_back(stage(cascade[k]));
      plan.check_every = d.check_every;
      plan.escalates = r.fn(&th_router_vtable::escalate) != nullptr;
      if (!plan.escalates) plan.stages.resize(1);  // a router before 1.7: its first stage alone
      break;
    }
    case TH_ROUTE_DISAGGREGATE: {
      if (auto why = listed(); !why.empty()) return why;
      if (d.n_cascade != 2)
        return r.id() + " listed " + std::to_string(d.n_cascade) + " candidates to disaggregate; a prefill and a decode engine are 2";
      if (std::string(candidates[cascade[0]].model) != candidates[cascade[1]].model)
        return r.id() + " disaggregated over engines of two models (" + candidates[cascade[0]].model + ", " + candidates[cascade[1]].model +
               "): the decode engine continues the prefill engine's KV, of one model";
      plan.stages = {stage(cascade[0]), stage(cascade[1])};
      break;
    }
    case TH_ROUTE_ENSEMBLE: {
      if (auto why = listed(); !why.empty()) return why;
      const uint32_t samples = d.n_samples == 0 ? 1 : d.n_samples;
      if (samples > kMaxEnsembleSamples || size_t(samples) * d.n_cascade > kMaxEnsembleAnswers)
        return r.id() + " asked for " + std::to_string(samples) + " samples of " + std::to_string(d.n_cascade) +
               " candidates; an ensemble has at most " + std::to_string(kMaxEnsembleSamples) + " per candidate and " +
               std::to_string(kMaxEnsembleAnswers) + " in all";
      for (uint32_t k = 0; k < d.n_cascade; ++k)
        for (uint32_t j = 0; j < samples; ++j) plan.stages.push_back(stage(cascade[k]));
      break;
    }
    case TH_ROUTE_CACHED: {
      if (!job.deterministic)
        return r.id() + " answered from its cache a request that is not deterministic (th_route_request.deterministic is 0)";
      if (d.n_cached_tokens > req.max_tokens)
        return r.id() + " answered from its cache with " + std::to_string(d.n_cached_tokens) + " tokens, more than the request's max_tokens (" +
               std::to_string(req.max_tokens) + ")";
      if (d.n_cached_tokens > 0 && d.cached_tokens == nullptr) return r.id() + " answered from its cache with NULL cached_tokens";
      if (d.cached_stop != TH_STOP_EOS && d.cached_stop != TH_STOP_LENGTH)
        return r.id() + " answered from its cache with cached_stop " + std::to_string(d.cached_stop) + " (TH_STOP_EOS or TH_STOP_LENGTH)";
      const auto vocab = s.vocab_sizes.find(candidates[0].model);
      for (uint32_t k = 0; k < d.n_cached_tokens; ++k)
        if (d.cached_tokens[k] < 0 || (vocab != s.vocab_sizes.end() && uint32_t(d.cached_tokens[k]) >= vocab->second))
          return r.id() + " answered from its cache with token " + std::to_string(d.cached_tokens[k]) + " at position " + std::to_string(k) +
                 ", outside the vocabulary";
      plan.cached.assign(d.cached_tokens, d.cached_tokens + d.n_cached_tokens);
      plan.cached_stop = d.cached_stop;
      break;
    }
    default:
      return r.id() + " returned action " + std::to_string(d.action) + ", which this host does not know";
  }
  if (!degraded_class.empty() && s.overload && !plan.stages.empty())
    s.overload->degraded(req.model, degraded_class, plan.stages.front().entry->engine.model);
  return plan;
}

// The A/B split, before the router plugin: a request for a model with a running experiment goes to its
// arm's engine. nullopt when none runs (the plugin plans), else the plan or why the request is refused.
std::optional<PlanOutcome> plan_by_experiment(RouterState& s, RouteJob& job) {
  if (!s.experiments) return std::nullopt;
  const GenerateRequest& req = job.req;
  experiments::RequestKeys keys{req.model, req.session_key, req.user, req.api_key, req.arm, req.request_class};
  auto routed = s.experiments->route(keys);
  if (auto* why = std::get_if<std::string>(&routed)) return *why;
  auto* routing = std::get_if<experiments::Routing>(&routed);
  if (routing == nullptr) return std::nullopt;
  if (routing->router) {  // a router arm: its router plans the request
    job.router = routing->router;
    job.routing = std::move(*routing);
    return plan_route(s, job);
  }
  auto* entry = find_engine(s, routing->engine);
  if (entry == nullptr) return "engine '" + routing->engine + "' of the experiment's arm is not taking requests";
  RoutePlan plan;
  plan.stages.push_back({*entry, 0, 1.0, 1.0});
  job.routing = std::move(*routing);
  return plan;
}

void record_experiment_outcome(RouterState& s, const std::optional<experiments::Routing>& routing, const GenerateResult& r) {
  if (!s.experiments || !routing) return;
  experiments::Outcome o;
  o.failed = r.finish_reason == "error";
  o.completed = r.finish_reason == "length" || r.finish_reason == "stop";
  o.tokens_out = uint32_t(r.tokens.size());
  o.ttft_s = r.ttft_s;
  o.itl_s = r.itl_s;
  o.e2e_s = r.e2e_s;
  o.cached = r.cached;
  o.cost = r.cost;
  s.experiments->record(*routing, o);
}

double stage_cost(const PlanStage& st, size_t prompt, size_t generated) { return st.cost * double(prompt + generated) / 1e6; }

RouteHop hop(const PlanStage& st, const char* outcome, uint32_t tokens, const th_route_signal* sig) {
  RouteHop h;
  h.engine = st.entry->engine.name;
  h.model = st.entry->engine.model;
  h.outcome = outcome;
  h.tokens = tokens;
  if (sig != nullptr) {
    h.mean_logprob = sig->mean_logprob;
    h.min_logprob = sig->min_logprob;
    h.mean_entropy = sig->mean_entropy;
  }
  return h;
}

// The signal of the tokens in stream (every one sampled there, with its log-probability and entropy).
th_route_signal stream_signal(const std::shared_ptr<TokenStream>& stream, int32_t stop) {
  routing::ConfidenceSignal sig;
  if (stream)
    for (const auto& t : stream->wait(0, 0ms).tokens) sig.add(t);
  return sig.signal(stop);
}

// The stage's new tokens, from its stream.
void read_new(StageRun& run) {
  auto u = run.stream->wait(run.seen, 0ms);
  run.seen += u.tokens.size();
  for (const auto& t : u.tokens) {
    run.tokens.push_back(t);
    run.signal.add(t);
  }
}

// The stage's tokens not yet given to the client, pushed to its stream.
void forward(RouteJob& job, StageRun& run) {
  if (run.forwarded < run.tokens.size() && !job.first_token) job.first_token = Clock::now();
  for (; run.forwarded < run.tokens.size(); ++run.forwarded)
    if (job.req.stream) job.req.stream->push(run.tokens[run.forwarded]);
}

void feedback(RouterState& s, const RouteJob& job, const GenerateResult& r, const th_route_signal* sig) {
  auto& plugin = *job.router;
  if (!plugin.fn(&th_router_vtable::feedback)) return;
  const std::string text = s.detokenize ? s.detokenize(r.model.empty() ? job.req.model : r.model, r.tokens) : std::string();
  th_route_feedback f{};
  f.struct_size = sizeof f;
  f.request_id = job.req.id;
  f.engine_id = r.engine.c_str();
  f.ok = r.finish_reason != "error";
  f.ttft_s = r.ttft_s.value_or(0.0);
  f.total_s = seconds_since(job.started);
  f.tokens_in = uint32_t(job.req.prompt.size());
  f.tokens_out = uint32_t(r.tokens.size());
  f.output_text = s.detokenize ? text.c_str() : nullptr;
  f.output_len = text.size();
  f.prompt_tokens = job.req.prompt.data();
  f.n_prompt_tokens = uint32_t(job.req.prompt.size());
  f.output_tokens = r.tokens.data();
  f.stop = routing::stop_of(r.finish_reason);
  f.cache_namespace = job.cache_namespace;
  f.params_key = job.params_key;
  f.deterministic = job.deterministic ? 1 : 0;
  f.cached = r.cached ? 1 : 0;
  f.stages = job.engines_run;
  f.cost = job.cost;
  f.signal = sig;
  try {
    plugin.call(&th_router_vtable::feedback, "feedback", plugin.handle(), &f);
  } catch (const PluginFault&) {
    // Logged; the request itself finished: its answer goes out as it is.
  }
}

// The request's end: its result completed with the plan's path and cost, the plugin told, counted,
// delivered. how: the metrics' label (engine, cascade_first, escalated, ensemble, cached, disaggregated).
void answer(self_ptr self, const std::shared_ptr<RouteJob>& job, GenerateResult r, const char* how) {
  auto& s = self->state;
  if (!s.jobs.erase(job->req.id)) return;  // answered already
  r.path = job->path;
  r.cost = job->cost;
  if (job->first_token) {
    // The router gave the client its tokens (a cascade's kept stage, an ensemble's choice, a cache).
    r.ttft_s = std::chrono::duration<double>(*job->first_token - job->started).count();
    r.e2e_s = seconds_since(job->started);
  } else if (job->answer_started != job->started) {
    // The answering stage streamed itself after the stages before it.
    const double before = std::chrono::duration<double>(job->answer_started - job->started).count();
    if (r.ttft_s) *r.ttft_s += before;
    if (r.e2e_s) *r.e2e_s += before;
  }
  record_experiment_outcome(s, job->routing, r);
  const th_route_signal sig = stream_signal(job->req.stream, routing::stop_of(r.finish_reason));
  feedback(s, *job, r, r.cached || !job->req.stream ? nullptr : &sig);
  const std::string model = job->req.model.empty() ? "-" : job->req.model;
  if (s.answers) s.answers->add({model, how}, 1);
  if (s.costs && job->cost > 0) s.costs->add({model}, job->cost);
  job->rp.deliver(std::move(r));
}

void restart(self_ptr self, const std::shared_ptr<RouteJob>& job, const GenerateResult& handed_back);
void start_stage(self_ptr self, const std::shared_ptr<RouteJob>& job);

// Forwards sub to entry's engine; done gets its result (or a failure if the engine stops first).
void run_on(self_ptr self, const std::shared_ptr<RoutedEntry>& entry, GenerateRequest sub, std::function<void(GenerateResult&)> done) {
  auto& s = self->state;
  ++entry->in_flight;
  ++s.in_flight;
  if (entry->breaker) entry->breaker->sent();
  const uint64_t seq = sub.id;
  s.holders[seq] = RouterState::Held{entry, std::move(done)};
  self->request(entry->engine.actor, caf::infinite, generate_atom::value, std::move(sub))
      .then([self, seq](GenerateResult& r) { settle(self, seq, r); },
            [self, seq, entry](caf::error& e) {
              const std::string& name = entry->engine.name;
              std::string why;
              if (e == caf::sec::request_receiver_down) {
                // The engine's actor had ended before the request reached it (its down message is still on
                // the way): in the words drop_engine will use, the fault its vitals noted if any.
                const std::string ended = "its actor had ended";
                const std::string reason = entry->engine.vitals ? entry->engine.vitals->account(ended) : ended;
                why = "engine " + name + " stopped (" + reason + ") before it took the request";
              } else {
                why = "engine " + name + " failed: " + self->system().render(e);
              }
              auto r = GenerateResult::failed(name, why);
              settle(self, seq, r);
            });
}

// The plugin's verdict at a cascade stage's checkpoint, or why the request fails.
std::variant<int32_t, std::string> ask_escalate(const RouteJob& job, const StageRun& run, int32_t stop) {
  auto& p = *job.router;
  if (!p.fn(&th_router_vtable::escalate)) return int32_t(TH_STAGE_CONTINUE);  // swapped for a router without it
  const PlanStage& st = job.plan.stages[job.stage];
  const th_route_signal sig = run.signal.signal(stop);
  std::vector<int32_t> tokens;
  tokens.reserve(run.tokens.size());
  for (const auto& t : run.tokens) tokens.push_back(t.token);
  th_route_stage q{};
  q.struct_size = sizeof q;
  q.request_id = job.req.id;
  q.stage = job.stage;
  q.n_stages = uint32_t(job.plan.stages.size());
  q.candidate = st.candidate;
  q.engine_id = st.entry->engine.name.c_str();
  q.model = st.entry->engine.model.c_str();
  q.cost_per_mtok = st.cost;
  q.quality = st.quality;
  q.tokens = tokens.data();
  q.signal = &sig;
  int32_t verdict = TH_STAGE_CONTINUE;
  th_error err;
  th_status status;
  try {
    status = p.call(&th_router_vtable::escalate, "escalate", p.handle(), &q, &verdict, &err);
  } catch (const PluginFault& e) {
    return std::string(e.what());
  }
  if (status != TH_OK) return p.id() + " escalate() failed with " + status_name(status) + ": " + err.text();
  if (verdict != TH_STAGE_CONTINUE && verdict != TH_STAGE_ESCALATE && verdict != TH_STAGE_ACCEPT)
    return p.id() + " escalate() gave verdict " + std::to_string(verdict) + ", none of TH_STAGE_CONTINUE, TH_STAGE_ESCALATE, TH_STAGE_ACCEPT";
  return verdict;
}

// Leaves the running stage (its sequence cancelled, its tokens so far accounted) for the next one.
void escalate(self_ptr self, const std::shared_ptr<RouteJob>& job, const char* outcome) {
  StageRun& run = job->runs.at(0);
  const PlanStage& st = job->plan.stages[job->stage];
  self->send(st.entry->engine.actor, cancel_atom::value, run.seq);
  run.stream->cancel();
  const th_route_signal sig = run.signal.signal(TH_STOP_CANCELLED);
  job->cost += stage_cost(st, job->req.prompt.size(), run.tokens.size());
  job->path.push_back(hop(st, outcome, uint32_t(run.tokens.size()), &sig));
  spdlog::debug("router: {} {} on engine {} after {} tokens (mean logprob {:.3f}, min {:.3f}, mean entropy {:.3f}): stage {} of {} next",
                job->req.label(), outcome, st.entry->engine.name, run.tokens.size(), sig.mean_logprob, sig.min_logprob, sig.mean_entropy,
                job->stage + 2, job->plan.stages.size());
  job->runs.clear();  // its late end is ignored (stage_done sees another sequence)
  ++job->stage;
  start_stage(self, job);
}

void fail(self_ptr self, const std::shared_ptr<RouteJob>& job, const std::string& why) {
  cancel_job(self, *job);
  answer(self, job, GenerateResult::failed("", why), "failed");
}

// The end of a disaggregated request's first stage (the prompt and the first token on the prefill
// engine, its blocks stored): the client gets that token and the decode engine continues; a request
// that ended there is answered; a prefill engine that failed leaves the whole request to the decode
// engine, as on one engine.
void handoff(self_ptr self, const std::shared_ptr<RouteJob>& job, GenerateResult& r) {
  StageRun& run = job->runs.at(0);
  read_new(run);
  const PlanStage& st = job->plan.stages[0];
  const th_route_signal sig = run.signal.signal(routing::stop_of(r.finish_reason));
  job->cost += stage_cost(st, job->req.prompt.size(), r.tokens.size());
  if (r.finish_reason == "error" && !job->cancelled) {
    spdlog::warn("router: {}: prefill engine {} failed ({}); the decode engine {} computes the whole request", job->req.label(),
                 st.entry->engine.name, r.error, job->plan.stages[1].entry->engine.name);
    job->path.push_back(hop(st, "failed", uint32_t(r.tokens.size()), &sig));
    job->runs.clear();
    ++job->stage;
    return start_stage(self, job);
  }
  forward(*job, run);
  if (r.finish_reason != "length" || job->cancelled || r.tokens.size() >= job->req.max_tokens) {
    job->path.push_back(hop(st, "answered", uint32_t(r.tokens.size()), &sig));
    r.model = st.entry->engine.model;
    return answer(self, job, std::move(r), "disaggregated");
  }
  job->path.push_back(hop(st, "prefilled", uint32_t(r.tokens.size()), &sig));
  job->handed = run.tokens;
  job->runs.clear();
  ++job->stage;
  start_stage(self, job);
}

// The end of a stage before the last (seq its sequence): answered with, or escalated from.
void stage_done(self_ptr self, const std::shared_ptr<RouteJob>& job, uint64_t seq, GenerateResult& r) {
  auto& s = self->state;
  if (!s.jobs.count(job->req.id) || job->runs.size() != 1 || job->runs[0].seq != seq) return;  // a stage it left
  if (r.finish_reason == GenerateResult::kRerouted) return restart(self, job, r);
  if (job->plan.action == TH_ROUTE_DISAGGREGATE) return handoff(self, job, r);
  StageRun& run = job->runs[0];
  read_new(run);
  if (r.finish_reason == "error" && !job->cancelled) return escalate(self, job, "failed");
  if (!run.committed && r.finish_reason != "cancelled") {
    auto verdict = ask_escalate(*job, run, routing::stop_of(r.finish_reason));
    if (auto* why = std::get_if<std::string>(&verdict)) return fail(self, job, *why);
    if (std::get<int32_t>(verdict) == TH_STAGE_ESCALATE) return escalate(self, job, "escalated");
  }
  const PlanStage& st = job->plan.stages[job->stage];
  forward(*job, run);
  const th_route_signal sig = run.signal.signal(routing::stop_of(r.finish_reason));
  job->cost += stage_cost(st, job->req.prompt.size(), r.tokens.size());
  job->path.push_back(hop(st, "answered", uint32_t(r.tokens.size()), &sig));
  r.model = st.entry->engine.model;
  answer(self, job, std::move(r), job->stage == 0 ? "cascade_first" : "escalated");
}

void last_stage_done(self_ptr self, const std::shared_ptr<RouteJob>& job, GenerateResult& r);

// The client's request as an engine continues it: after a disaggregated request's first stage, with the
// tokens handed on at the end of its prompt and taken off its max_tokens.
GenerateRequest continuation(const RouteJob& job) {
  GenerateRequest sub = job.req;
  for (const auto& t : job.handed) sub.prompt.push_back(t.token);
  sub.max_tokens -= uint32_t(std::min<size_t>(job.handed.size(), sub.max_tokens));
  return sub;
}

// A disaggregated request whose decode engine failed before its first token (a full pool, a fault): the
// prefill engine, whose memory cache holds the prompt's blocks, continues in its place.
void decode_on_prefill_engine(self_ptr self, const std::shared_ptr<RouteJob>& job, const GenerateResult& failed) {
  const PlanStage& decode = job->plan.stages[1];
  spdlog::warn("router: {}: decode engine {} failed before its first token ({}); prefill engine {} continues", job->req.label(),
               decode.entry->engine.name, failed.error, job->plan.stages[0].entry->engine.name);
  job->path.push_back(hop(decode, "failed", 0, nullptr));
  job->decode_rerouted = true;
  job->stage = 0;
  ++job->engines_run;
  run_on(self, job->plan.stages[0].entry, continuation(*job), [self, job](GenerateResult& r) { last_stage_done(self, job, r); });
}

// The end of the last stage (or the only one): its tokens went to the client as they came.
void last_stage_done(self_ptr self, const std::shared_ptr<RouteJob>& job, GenerateResult& r) {
  if (!self->state.jobs.count(job->req.id)) return;
  if (r.finish_reason == GenerateResult::kRerouted) return restart(self, job, r);
  if (job->plan.action == TH_ROUTE_DISAGGREGATE && job->stage == 1 && !job->handed.empty() && !job->decode_rerouted &&
      r.finish_reason == "error" && r.tokens.empty() && !job->cancelled)
    return decode_on_prefill_engine(self, job, r);
  const PlanStage& st = job->plan.stages[job->stage];
  const th_route_signal sig = stream_signal(job->req.stream, routing::stop_of(r.finish_reason));
  job->cost += stage_cost(st, job->req.prompt.size() + job->handed.size(), r.tokens.size());
  job->path.push_back(hop(st, r.finish_reason == "error" ? "failed" : "answered", uint32_t(r.tokens.size()), &sig));
  r.model = st.entry->engine.model;
  if (!job->handed.empty()) {  // a disaggregated answer: the prefill engine's first token, then the decode engine's
    std::vector<int32_t> tokens;
    for (const auto& t : job->handed) tokens.push_back(t.token);
    r.tokens.insert(r.tokens.begin(), tokens.begin(), tokens.end());
    if (job->req.logprobs) r.logprobs.insert(r.logprobs.begin(), job->handed.begin(), job->handed.end());
  }
  const bool disaggregated = job->plan.action == TH_ROUTE_DISAGGREGATE;
  answer(self, job, std::move(r), disaggregated ? "disaggregated" : job->stage == 0 ? "engine" : "escalated");
}

void start_stage(self_ptr self, const std::shared_ptr<RouteJob>& job) {
  auto& s = self->state;
  const PlanStage& st = job->plan.stages[job->stage];
  ++job->engines_run;
  job->answer_started = Clock::now();
  GenerateRequest sub = continuation(*job);  // a disaggregated request's decode engine: the prompt and the first token
  if (job->plan.action == TH_ROUTE_DISAGGREGATE && job->stage == 0) {
    sub.max_tokens = 1;  // the prompt and its first token; its blocks stored before it answers
    sub.kv_handoff = true;
  }
  if (job->stage + 1 == job->plan.stages.size()) {
    // The last stage streams to the client itself, under the client's sequence id.
    run_on(self, st.entry, std::move(sub), [self, job](GenerateResult& r) { last_stage_done(self, job, r); });
    return;
  }
  StageRun run;
  run.seq = s.private_ids++;
  run.stream = std::make_shared<TokenStream>();
  run.tick_queued = std::make_shared<std::atomic<bool>>(false);
  run.next_check = job->plan.check_every;
  // Each change of the stage's stream (on the engine's thread) asks the router to look, once at a
  // time; a weak address, so that a stream outliving the router keeps nothing alive.
  auto signal = std::make_shared<StreamSignal>();
  signal->on_change([addr = self->address(), queued = run.tick_queued, id = job->req.id] {
    if (queued->exchange(true)) return;
    if (auto router = caf::actor_cast<router_actor>(addr)) caf::anon_send(router, stage_tick_atom::value, id);
  });
  run.stream->listen(signal);
  sub.id = run.seq;
  sub.stream = run.stream;
  sub.live = true;  // the router reads the stage's tokens as they come (its checkpoints)
  const uint64_t seq = run.seq;
  job->runs.assign(1, std::move(run));
  run_on(self, st.entry, std::move(sub), [self, job, seq](GenerateResult& r) { stage_done(self, job, seq, r); });
}

// --- Ensembles ---

void choose_answer(self_ptr self, const std::shared_ptr<RouteJob>& job) {
  auto& s = self->state;
  std::vector<size_t> ok;
  for (size_t i = 0; i < job->runs.size(); ++i)
    if (job->runs[i].result && job->runs[i].result->finish_reason != "error") ok.push_back(i);
  if (job->cancelled || ok.empty()) {
    GenerateResult r = job->cancelled ? *job->runs[0].result : GenerateResult::failed("", "every answer of the ensemble failed: " + job->runs[0].result->error);
    return answer(self, job, std::move(r), "ensemble");
  }
  std::vector<th_route_signal> sigs(job->runs.size());
  for (size_t i = 0; i < job->runs.size(); ++i) sigs[i] = job->runs[i].signal.signal(routing::stop_of(job->runs[i].result->finish_reason));
  size_t chosen = ok[0];
  for (size_t i : ok)
    if (sigs[i].mean_logprob > sigs[chosen].mean_logprob) chosen = i;
  auto& p = *job->router;
  if (p.fn(&th_router_vtable::select)) {
    std::vector<th_route_answer> answers(job->runs.size());
    std::vector<std::string> texts(job->runs.size());
    for (size_t i = 0; i < job->runs.size(); ++i) {
      const PlanStage& st = job->plan.stages[i];
      const GenerateResult& r = *job->runs[i].result;
      texts[i] = s.detokenize ? s.detokenize(st.entry->engine.model, r.tokens) : std::string();
      answers[i] = {sizeof(th_route_answer), st.candidate, st.entry->engine.name.c_str(), st.entry->engine.model.c_str(), r.tokens.data(),
                    uint32_t(r.tokens.size()), texts[i].data(), texts[i].size(), &sigs[i]};
    }
    th_route_ensemble e{sizeof e, job->req.id, answers.data(), uint32_t(answers.size())};
    uint32_t pick = 0;
    th_error err;
    th_status status;
    try {
      status = p.call(&th_router_vtable::select, "select", p.handle(), &e, &pick, &err);
    } catch (const PluginFault& f) {
      return answer(self, job, GenerateResult::failed("", f.what()), "ensemble");
    }
    if (status != TH_OK) return answer(self, job, GenerateResult::failed("", p.id() + " select() failed with " + status_name(status) + ": " + err.text()), "ensemble");
    if (pick >= answers.size() || sigs[pick].stop == TH_STOP_ERROR)
      return answer(self, job, GenerateResult::failed("", p.id() + " select() chose answer " + std::to_string(pick) + " of " +
                                                              std::to_string(answers.size()) + (pick < answers.size() ? ", which failed" : "")),
                    "ensemble");
    chosen = pick;
  }
  for (size_t i = 0; i < job->runs.size(); ++i) {
    const GenerateResult& r = *job->runs[i].result;
    const char* outcome = i == chosen ? "answered" : r.finish_reason == "error" ? "failed" : "outvoted";
    job->path.push_back(hop(job->plan.stages[i], outcome, uint32_t(r.tokens.size()), &sigs[i]));
  }
  forward(*job, job->runs[chosen]);
  GenerateResult r = *job->runs[chosen].result;
  r.model = job->plan.stages[chosen].entry->engine.model;
  answer(self, job, std::move(r), "ensemble");
}

void start_ensemble(self_ptr self, const std::shared_ptr<RouteJob>& job) {
  auto& s = self->state;
  const size_t n = job->plan.stages.size();
  job->runs.resize(n);
  job->pending = n;
  for (size_t i = 0; i < n; ++i) {
    StageRun& run = job->runs[i];
    run.seq = s.private_ids++;
    run.stream = std::make_shared<TokenStream>();
    GenerateRequest sub = job->req;
    sub.id = run.seq;
    sub.stream = run.stream;
    sub.live = true;  // the router reads each answer as it comes
    if (sub.sampling.temperature > 0.0f) sub.sampling.seed += 0x9e3779b97f4a7c15ull * (i + 1);  // the samples differ
    ++job->engines_run;
    run_on(self, job->plan.stages[i].entry, std::move(sub), [self, job, i](GenerateResult& r) {
      if (!self->state.jobs.count(job->req.id)) return;
      if (r.finish_reason == GenerateResult::kRerouted) r = GenerateResult::failed(r.engine, "its engine retired before starting it");
      StageRun& run = job->runs[i];
      read_new(run);
      job->cost += stage_cost(job->plan.stages[i], job->req.prompt.size(), r.tokens.size());
      run.result = std::move(r);
      if (--job->pending == 0) choose_answer(self, job);
    });
  }
}

void answer_cached(self_ptr self, const std::shared_ptr<RouteJob>& job) {
  GenerateResult r;
  r.tokens = job->plan.cached;
  r.finish_reason = job->plan.cached_stop == TH_STOP_EOS ? "stop" : "length";
  r.cached = true;
  job->first_token = Clock::now();
  if (job->req.stream)
    for (int32_t t : r.tokens) job->req.stream->push(SampledToken{t, 0.0f, 0.0f, {}});
  answer(self, job, std::move(r), "cached");
}

void restart(self_ptr self, const std::shared_ptr<RouteJob>& job, const GenerateResult& handed_back) {
  // Handed back by its engine: one that retired before starting it (no tokens), or a remote one whose
  // node was lost after tokens no client had seen (request.hpp: live). Routed again, to the engine
  // that took its place or another; a run lost that way is run again once.
  if (!handed_back.tokens.empty()) {
    if (job->req.reruns > 0)
      return fail(self, job, "engine " + handed_back.engine + " was lost while running it, and so was the engine of its first run");
    ++job->req.reruns;
    spdlog::warn("{}: engine {} was lost after {} token(s) nobody had seen: run again", job->req.label(), handed_back.engine,
                 handed_back.tokens.size());
  }
  self->state.jobs.erase(job->req.id);
  dispatch(self, job->req, job->rp);
}

}  // namespace

void settle(self_ptr self, uint64_t seq, GenerateResult& r) {
  auto& s = self->state;
  auto it = s.holders.find(seq);
  if (it == s.holders.end()) return;  // already settled: its engine stopped (drop_engine)
  RouterState::Held held = std::move(it->second);
  s.holders.erase(it);
  --held.entry->in_flight;
  --s.in_flight;
  record_outcome(*held.entry, r);
  held.done(r);
  quit_when_idle(self);
}

void quit_when_idle(self_ptr self) {
  if (self->state.draining && self->state.jobs.empty()) self->quit();
}

void dispatch(self_ptr self, GenerateRequest req, caf::typed_response_promise<GenerateResult> rp) {
  auto& s = self->state;
  if (s.draining) {
    rp.deliver(GenerateResult::failed("", "the server is shutting down"));
    return;
  }
  auto job = std::make_shared<RouteJob>();
  job->req = std::move(req);
  job->rp = rp;
  job->router = s.router;
  const GenerateRequest& q = job->req;
  const routing::AnswerParams params{q.model, q.sampling, q.seeded, q.max_tokens, q.ignore_eos, q.logprobs, q.max_draft};
  job->cache_namespace = cache_namespace(q.api_key, q.cache_salt);
  job->params_key = routing::params_key(params);
  job->deterministic = routing::deterministic(params);
  const auto deciding = Clock::now();
  auto planned = plan_by_experiment(s, *job);
  if (!planned) planned = plan_route(s, *job);
  const double decided_s = seconds_since(deciding);
  s.decision_times.add(decided_s);
  if (s.decisions) s.decisions->observe({}, decided_s);
  if (auto* why = std::get_if<std::string>(&*planned)) {
    rp.deliver(GenerateResult::failed("", *why));
    return;
  }
  if (auto* no = std::get_if<RouteRefusal>(&*planned)) {
    auto r = GenerateResult::failed("", no->message);
    r.refused_status = no->status;
    r.retry_after_s = no->retry_after_s;
    r.refused_code = no->code;
    rp.deliver(std::move(r));
    return;
  }
  job->plan = std::move(std::get<RoutePlan>(*planned));
  ++s.routed;
  s.jobs[job->req.id] = job;
  switch (job->plan.action) {
    case TH_ROUTE_CACHED: answer_cached(self, job); return;
    case TH_ROUTE_ENSEMBLE: start_ensemble(self, job); break;
    default: start_stage(self, job); break;
  }
  // A cancel that came before its request.
  auto early = std::find(s.early_cancels.begin(), s.early_cancels.end(), job->req.id);
  if (early != s.early_cancels.end()) {
    s.early_cancels.erase(early);
    cancel_job(self, *job);
  }
}

void stage_tick(self_ptr self, uint64_t client_id) {
  auto& s = self->state;
  auto it = s.jobs.find(client_id);
  if (it == s.jobs.end() || it->second->plan.action != TH_ROUTE_CASCADE || it->second->runs.size() != 1) return;
  std::shared_ptr<RouteJob> job = it->second;
  StageRun& run = job->runs[0];
  run.tick_queued->store(false);
  read_new(run);
  if (run.committed) return forward(*job, run);
  const uint32_t every = job->plan.check_every;
  while (every > 0 && !job->cancelled && run.tokens.size() >= run.next_check) {
    auto verdict = ask_escalate(*job, run, TH_STOP_NONE);
    if (auto* why = std::get_if<std::string>(&verdict)) return fail(self, job, *why);
    switch (std::get<int32_t>(verdict)) {
      case TH_STAGE_ESCALATE: return escalate(self, job, "escalated");
      case TH_STAGE_ACCEPT:
        run.committed = true;
        return forward(*job, run);
      default: run.next_check += every;
    }
  }
}

void cancel_job(self_ptr self, RouteJob& job) {
  auto& s = self->state;
  job.cancelled = true;
  auto cancel = [&](uint64_t seq) {
    if (auto h = s.holders.find(seq); h != s.holders.end()) self->send(h->second.entry->engine.actor, cancel_atom::value, seq);
  };
  cancel(job.req.id);
  for (auto& run : job.runs) {
    if (run.stream) run.stream->cancel();
    cancel(run.seq);
  }
}

}  // namespace tokenhost
