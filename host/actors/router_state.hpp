// The router actor's state, shared by its two files: router.cpp (the engines it routes to, cancels,
// drains, swaps) and route_plans.cpp (what it does with its router plugin's answer: one engine, a
// cascade that escalates on the confidence signal, an ensemble, or a cached answer). Not a public
// header: nothing outside the router actor includes it.
#pragma once

#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/messages.hpp"
#include "actors/router.hpp"
#include "actors/swap_latency.hpp"
#include "routing/confidence.hpp"
#include "runtime/prefix_summary.hpp"

namespace tokenhost {

// An engine the router forwards to. Requests in flight hold their entry, so an engine removed or
// replaced while they run is still counted until they are answered.
struct RoutedEntry {
  RoutedEngine engine;
  uint32_t in_flight = 0;
  std::shared_ptr<routing::EngineBreaker> breaker;  // NULL without breakers
};

// One engine the plan runs on: the candidate the router plugin named, with its declared figures.
struct PlanStage {
  std::shared_ptr<RoutedEntry> entry;
  uint32_t candidate = 0;
  double cost = 1.0, quality = 1.0;
};

// What the router plugin decided for a request, checked.
struct RoutePlan {
  int32_t action = TH_ROUTE_TARGET;
  std::vector<PlanStage> stages;  // TARGET: one; CASCADE: in order; ENSEMBLE: each answer's engine
  uint32_t check_every = 0;       // CASCADE
  bool escalates = false;         // CASCADE: the plugin has escalate() (else the first stage alone)
  std::vector<int32_t> cached;    // CACHED
  int32_t cached_stop = TH_STOP_NONE;
};

// A sequence of the stage that runs now, read from its own stream (the client's gets only the
// tokens of the stage that answers).
struct StageRun {
  uint64_t seq = 0;  // its id at the engine
  std::shared_ptr<TokenStream> stream;
  std::shared_ptr<std::atomic<bool>> tick_queued;  // a stage_tick is on its way (one at a time)
  size_t seen = 0;
  std::vector<SampledToken> tokens;
  size_t forwarded = 0;  // of tokens, pushed to the client's stream
  routing::ConfidenceSignal signal;
  uint32_t next_check = 0;  // ask escalate() once this many tokens are in (0: only at the end)
  bool committed = false;   // accepted early: its tokens go to the client as they come
  std::optional<GenerateResult> result;  // an ensemble's answer, once in
};

// One client sequence the router answers: its request, where it is in its plan, what it cost.
struct RouteJob {
  GenerateRequest req;  // as the gateway sent it: req.stream is the client's
  caf::typed_response_promise<GenerateResult> rp;
  std::optional<experiments::Routing> routing;  // the A/B arm it was routed by, if any
  RoutePlan plan;
  // The router plugin that plans it: the deployment's, or its A/B arm's (a router arm).
  std::shared_ptr<PluginInstance> router;
  // th_route_request's keys (routing/route_keys.hpp), made once: the plugin's feedback repeats them.
  uint64_t cache_namespace = 0, params_key = 0;
  bool deterministic = false;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point answer_started = started;  // the answering stage's start
  std::optional<std::chrono::steady_clock::time_point> first_token;  // the client's first (plans that buffer)
  uint32_t stage = 0;                // CASCADE: the stage running
  std::vector<StageRun> runs;        // CASCADE: the running stage's (one); ENSEMBLE: one per answer
  size_t pending = 0;                // ENSEMBLE: answers not yet in
  std::vector<RouteHop> path;
  double cost = 0;
  uint32_t engines_run = 0;
  bool cancelled = false;
  // DISAGGREGATE: the first stage's tokens (the first token), given to the client and to the second
  // stage as the end of its prompt.
  std::vector<SampledToken> handed;
  bool decode_rerouted = false;  // its decode engine failed before a token: the prefill engine went on
};

// How long the router takes to decide (the A/B split, the guards, the router plugin and the checks of
// its answer; not the engine's work nor the messages): the latest kDecisions, for the router's status.
class DecisionTimes {
 public:
  static constexpr size_t kDecisions = 1024;
  void add(double seconds) {
    recent_[next_++ % kDecisions] = seconds;
    ++count_;
  }
  uint64_t count() const { return count_; }
  // {"p50": µs, "p99": µs, "of": decisions they are of}, over the latest kDecisions.
  nlohmann::json json() const;

 private:
  std::array<double, kDecisions> recent_{};
  size_t next_ = 0;
  uint64_t count_ = 0;
};

// What choosing reads of an engine taking requests, side by side with the others' (RouterState::views,
// in RouterState::engines' order): a head choosing among a thousand engines reads one array and
// prefetches what else it needs (the entry's in_flight, the filter word), instead of three scattered
// objects per engine (bench/RESULTS.md, the head at fleet scale). Points into the entry, which
// RouterState::engines holds until the views are made again (index_engines()).
struct CandidateView {
  RoutedEntry* entry = nullptr;
  const char* name = nullptr;
  const char* node = nullptr;               // "" for an engine of this process
  const std::atomic<double>* rtt = nullptr;  // NULL for an engine of this process
  const PrefixSummary* summary = nullptr;    // NULL for an engine that caches no prefixes
  PrefixSummary::Filter filter{};            // its filter (words NULL without a summary)
  uint32_t block_size = 0;                   // its summary's block size
  uint32_t model = 0;                        // index in RouterState::models
  th_engine_role role = TH_ROLE_BOTH;        // th_route_request.candidate_roles
};

struct RouterState {
  std::shared_ptr<PluginInstance> router;
  std::vector<std::shared_ptr<RoutedEntry>> engines;  // those taking new requests, in name order
  // engines as choosing reads them, and the distinct models they serve; made by index_engines()
  // whenever engines changes.
  std::vector<CandidateView> views;
  std::vector<std::string> models;
  std::shared_ptr<experiments::ExperimentTable> experiments;
  std::function<std::string(const std::string&, const std::vector<int32_t>&)> detokenize;
  std::map<std::string, std::vector<RouteMember>> groups;
  std::map<std::string, uint32_t> vocab_sizes;
  metrics::Family* answers = nullptr;  // tokenhost_router_answers_total{model, how}
  metrics::Family* costs = nullptr;    // tokenhost_router_cost_total{model}
  metrics::Family* decisions = nullptr;  // tokenhost_router_decision_seconds
  DecisionTimes decision_times;
  uint64_t routed = 0;
  uint64_t in_flight = 0;  // engine sequences awaited, over every entry, removed ones included
  // Each engine sequence awaited, by its id there: the engine that holds it (a cancel goes there
  // alone) and what to do with its result, called here too if that engine stops before answering.
  struct Held {
    std::shared_ptr<RoutedEntry> entry;
    std::function<void(GenerateResult&)> done;
  };
  std::unordered_map<uint64_t, Held> holders;
  // The client sequences not yet answered, by the id the gateway gave them.
  std::unordered_map<uint64_t, std::shared_ptr<RouteJob>> jobs;
  uint64_t private_ids = uint64_t(1) << 62;  // ids of the sequences a plan starts besides the client's
  // Cancels that came before their request (the gateway's cancel and its start travel separately),
  // oldest first; bounded, since a cancel may also come after the answer.
  std::deque<uint64_t> early_cancels;
  static constexpr size_t kMaxEarlyCancels = 1024;
  bool draining = false;
  std::shared_ptr<routing::BreakerBoard> breakers;   // may be NULL
  std::shared_ptr<routing::OverloadGuard> overload;  // may be NULL
  SwapLatency swaps;  // the router has no steps: its swap is done once the new plugin is in place
  static inline const char* name = "tokenhost.router";
};

using self_ptr = router_actor::stateful_pointer<RouterState>;

// The router's entry for an engine, with its breaker.
inline std::shared_ptr<RoutedEntry> make_entry(RouterState& s, RoutedEngine engine) {
  auto e = std::make_shared<RoutedEntry>();
  if (s.breakers) e->breaker = s.breakers->breaker(engine.name);
  e->engine = std::move(engine);
  return e;
}

// Makes views and models again from engines: called after every change of engines.
void index_engines(RouterState& s);

inline std::shared_ptr<RoutedEntry>* find_engine(RouterState& s, const std::string& name) {
  for (auto& e : s.engines)
    if (e->engine.name == name) return &e;
  return nullptr;
}

// A request the guards refuse (every engine of its model has its breaker open, or is full for its
// class): the HTTP status, Retry-After and reason code it is answered with.
struct RouteRefusal {
  uint32_t status = 503, retry_after_s = 1;
  std::string code, message;
};
// A plan, why the request fails, or the guards' refusal.
using PlanOutcome = std::variant<RoutePlan, std::string, RouteRefusal>;

// An engine a request may go to: its index in RouterState::engines, its declared cost and quality.
struct Eligible {
  size_t engine = 0;
  double cost = 1.0, quality = 1.0;
};

// --- route_guards.cpp ---
// The guards' say on a request's eligible engines (routing/breaker.hpp, routing/overload.hpp): those
// whose breaker is open leave; when the models left are full for the request's class, it is refused
// (shed) or, with action "cheaper", its group's cheaper members that are not full are all that stays
// (degraded_class: its class, for the count once the plugin chose). Returns the refusal, if any.
std::optional<RouteRefusal> guard_candidates(RouterState& s, const RouteJob& job, std::vector<Eligible>& eligible,
                                             std::string& degraded_class);
// The breaker's account of an engine sequence that ended with r.
void record_outcome(RoutedEntry& entry, const GenerateResult& r);

// --- route_plans.cpp ---
// Routes req (the experiment's arm, else the router plugin's plan) and answers rp once done.
void dispatch(self_ptr self, GenerateRequest req, caf::typed_response_promise<GenerateResult> rp);
// A stage's stream changed: its new tokens read, its checkpoint taken.
void stage_tick(self_ptr self, uint64_t client_id);
// The client gave up on sequence id: every engine sequence of its plan is cancelled.
void cancel_job(self_ptr self, RouteJob& job);
// The engine sequence seq ended (or its engine stopped: r failed): its holder's continuation runs.
void settle(self_ptr self, uint64_t seq, GenerateResult& r);
// While draining, the router stays until every request it took has its answer delivered.
void quit_when_idle(self_ptr self);

}  // namespace tokenhost
