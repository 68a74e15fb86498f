#include <algorithm>

#include <nlohmann/json.hpp>

#include "actors/engine_state.hpp"
#include "actors/plugin_seconds.hpp"

namespace tokenhost::engine_detail {

void register_metrics(EngineState& s) {
  auto* r = s.init.metrics;
  if (r == nullptr) return;
  using metrics::Type;
  s.m.tokens_out = &r->family(Type::counter, "tokenhost_tokens_out_total", "Tokens generated", {"engine"});
  s.m.tokens_in = &r->family(Type::counter, "tokenhost_tokens_in_total", "Prompt tokens received", {"engine"});
  s.m.requests = &r->family(Type::counter, "tokenhost_requests_total", "Requests finished, by outcome", {"engine", "finish_reason"});
  s.m.step_seconds = &r->family(Type::histogram, "tokenhost_step_seconds", "Wall time of one engine step", {"engine"});
  s.m.step_compute_seconds = &r->family(Type::histogram, "tokenhost_step_compute_seconds",
                                        "Time the worker spent computing one step (the rest of a step's wall time "
                                        "is messages between the engine and its worker)",
                                        {"engine"});
  s.m.step_tokens = &r->family(Type::counter, "tokenhost_step_tokens_total",
                               "Tokens computed by engine steps: prompt chunks and decode tokens, a step's rows", {"engine"});
  s.m.running = &r->family(Type::gauge, "tokenhost_sequences_running", "Sequences with KV blocks", {"engine"});
  s.m.waiting = &r->family(Type::gauge, "tokenhost_sequences_waiting", "Sequences waiting or preempted", {"engine"});
  s.m.kv_free = &r->family(Type::gauge, "tokenhost_kv_blocks_free", "Free KV cache blocks", {"engine"});
  s.m.preemptions = &r->family(Type::counter, "tokenhost_preemptions_total", "Sequences preempted for KV blocks", {"engine"});
  s.m.kv_used = &r->family(Type::gauge, "tokenhost_kv_blocks_used", "KV cache blocks held by sequences", {"engine"});
  const std::vector<double> latency = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  s.m.ttft = &r->family(Type::histogram, "tokenhost_time_to_first_token_seconds",
                        "From a request's arrival at the engine to its first generated token", {"engine"}, latency);
  s.m.ttft_steps = &r->family(Type::histogram, "tokenhost_time_to_first_token_steps",
                              "Engine steps started from a request's arrival at the engine to its first token, that "
                              "step included (1: the next step served it): how long the scheduler made it wait",
                              {"engine"}, {1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128});
  s.m.itl = &r->family(Type::histogram, "tokenhost_inter_token_latency_seconds",
                       "Between successive generated tokens of one request", {"engine"}, latency);
  s.m.e2e = &r->family(Type::histogram, "tokenhost_request_duration_seconds",
                       "From a request's arrival at the engine to its end", {"engine"}, latency);
  s.m.scheduler_seconds = &plugin_seconds_family(*r);
  s.m.prefix_lookups = &r->family(Type::counter, "tokenhost_prefix_lookups_total",
                                  "Prompts looked up in the kvcache's prefix cache when their request arrived", {"engine"});
  s.m.prefix_hits = &r->family(Type::counter, "tokenhost_prefix_hits_total",
                               "Prompts that found a cached prefix (hit rate: over tokenhost_prefix_lookups_total)", {"engine"});
  s.m.prefix_cached_tokens = &r->family(Type::counter, "tokenhost_prefix_cached_tokens_total",
                                        "Prompt tokens served from the prefix cache instead of computed", {"engine"});
  s.m.kv_cached = &r->family(Type::gauge, "tokenhost_kv_blocks_cached",
                             "KV blocks no sequence holds that the prefix cache keeps for reuse (taken back when the pool needs them)",
                             {"engine"});
  s.m.draft_tokens = &r->family(Type::counter, "tokenhost_spec_draft_tokens_total",
                                "Draft tokens the spec_decode plugin proposed and the engine verified", {"engine", "plugin"});
  s.m.accepted_tokens = &r->family(Type::counter, "tokenhost_spec_accepted_tokens_total",
                                   "Draft tokens the target model agreed with: each one a token without a step of its own",
                                   {"engine", "plugin"});
  s.m.accepted_length = &r->family(Type::histogram, "tokenhost_spec_accepted_length",
                                   "Draft tokens accepted per verified draft (its count: drafts verified)", {"engine", "plugin"},
                                   {0, 1, 2, 3, 4, 6, 8, 12, 16});
  s.m.spec_step_seconds = &r->family(Type::gauge, "tokenhost_spec_step_seconds",
                                     "Recent mean of the worker's seconds per decode step (no prompt rows), steps that verified drafts "
                                     "(drafts=\"with\") and steps without (drafts=\"without\"), of an engine that speculates",
                                     {"engine", "drafts"});
}

void observe_step_cost(EngineState& s, uint32_t rows, double seconds, bool drafted) {
  if (!speculating(s)) return;
  s.draft_control.observe_step(rows, seconds, drafted);
  if (s.m.spec_step_seconds == nullptr || s.retiring) return;
  const DraftController& c = s.draft_control;
  s.m.spec_step_seconds->set({s.init.name, drafted ? "with" : "without"}, drafted ? c.step_seconds_drafted() : c.step_seconds_plain());
}

nlohmann::json controller_json(const EngineState& s) {
  const DraftController& c = s.draft_control;
  nlohmann::json by_rows = nlohmann::json::object();  // the first 16 row counts measured
  for (const auto& [rows, seconds] : c.measured_costs(16)) by_rows[std::to_string(rows)] = seconds;
  return {{"policy", draft_policy_name(c.policy())},
          {"step_seconds_by_rows", by_rows},
          {"acceptance", c.pooled_acceptance()},
          {"cost_fitted", c.cost_fitted()},
          {"cost_fixed_s", c.cost_fixed()},
          {"cost_per_row_s", c.cost_per_row()},
          {"step_seconds_with_drafts", c.step_seconds_drafted()},
          {"step_seconds_without_drafts", c.step_seconds_plain()},
          {"propose_seconds_per_token", c.propose_cost_per_token()}};
}

void update_gauges(EngineState& s) {
  // A retiring engine leaves the gauges of its name to the engine that replaced it.
  if (s.m.running == nullptr || s.retiring) return;
  size_t running = std::count_if(s.seqs.begin(), s.seqs.end(), [](const Sequence& q) { return q.state == TH_SEQ_RUNNING; });
  s.m.running->set({s.init.name}, double(running));
  s.m.waiting->set({s.init.name}, double(s.seqs.size() - running));
  // kv.free_blocks counts the cached blocks too (the scheduler may plan with them): shown apart here.
  s.m.kv_free->set({s.init.name}, double(s.kv.uncached_free_blocks()));
  s.m.kv_used->set({s.init.name}, double(s.kv.total_blocks - std::min(s.kv.free_blocks, s.kv.total_blocks)));
  if (s.init.prefix_cache) s.m.kv_cached->set({s.init.name}, double(s.kv.cached_blocks));
}

}  // namespace tokenhost::engine_detail
