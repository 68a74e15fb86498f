// router.cascade: the cheapest model of a group answers first; when the confidence signal of its
// answer crosses the threshold, the next model (by declared cost) answers instead. Within one model
// the least loaded engine serves. With `cache`, repeated deterministic requests are answered from an
// exact-match cache (sdk::ResponseCache) before any model runs.
#include <tokenhost/plugin_route.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

enum class Signal { mean_logprob, min_logprob, mean_entropy, max_entropy };

struct Settings {
  Signal signal = Signal::mean_logprob;
  double threshold = -1.0;
  uint32_t check_every = 0, min_tokens = 1, accept_after = 0;
  bool cache = false;
  sdk::ResponseCache::Limits limits;
};

Settings read_config(const th_config* config) {
  const sdk::Config c(config);
  Settings s;
  const std::string signal = c.require_string("signal");
  if (signal == "mean_logprob") s.signal = Signal::mean_logprob;
  else if (signal == "min_logprob") s.signal = Signal::min_logprob;
  else if (signal == "mean_entropy") s.signal = Signal::mean_entropy;
  else if (signal == "max_entropy") s.signal = Signal::max_entropy;
  else throw Error(TH_ERR_INVALID_ARGUMENT, "router.cascade: signal '" + signal + "' is none of mean_logprob, min_logprob, mean_entropy, max_entropy");
  s.threshold = c.require_double("threshold");
  s.check_every = uint32_t(c.require_int("check_every"));
  s.min_tokens = uint32_t(c.require_int("min_tokens"));
  s.accept_after = uint32_t(c.require_int("accept_after"));
  s.cache = c.require_bool("cache");
  s.limits = sdk::ResponseCache::limits_from(c);
  return s;
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "router.cascade: check() got NULL");
    read_config(query->config);
  });
}

class Cascade {
 public:
  explicit Cascade(const th_create_args& args) : settings_(read_config(args.config)), cache_(settings_.limits) {}

  th_status route(const th_route_request& request, th_route_decision& decision) {
    const uint32_t n = request.n_candidates;
    if (n == 0 || request.candidates == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "router.cascade: the request has no candidates");
    if (settings_.cache && cache_.answer(request, decision)) return TH_OK;
    // One stage per model, cheapest first (then the better one), each on its least loaded healthy engine.
    std::vector<uint32_t> order = sdk::least_loaded_per_model(request);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      const th_route_candidate &x = request.candidates[a], &y = request.candidates[b];
      return x.cost_per_mtok < y.cost_per_mtok || (x.cost_per_mtok == y.cost_per_mtok && x.quality > y.quality);
    });
    if (order.size() == 1) sdk::set_target(decision, order[0]);
    else sdk::set_cascade(decision, order, settings_.check_every);
    return TH_OK;
  }

  // Escalates exactly when the signal has crossed the threshold: at the end always, during generation
  // once min_tokens are in; accepts a stage early after accept_after tokens.
  int32_t escalate(const th_route_stage& stage) const {
    const th_route_signal& s = *stage.signal;
    const bool ended = s.stop != TH_STOP_NONE;
    if (!ended && s.n_tokens < settings_.min_tokens) return TH_STAGE_CONTINUE;
    if (crossed(s)) return TH_STAGE_ESCALATE;
    if (!ended && settings_.accept_after > 0 && s.n_tokens >= settings_.accept_after) return TH_STAGE_ACCEPT;
    return TH_STAGE_CONTINUE;
  }

  void feedback(const th_route_feedback& f) {
    if (settings_.cache) cache_.remember(f);
  }

 private:
  bool crossed(const th_route_signal& s) const {
    switch (settings_.signal) {
      case Signal::mean_logprob: return s.mean_logprob < settings_.threshold;
      case Signal::min_logprob: return s.min_logprob < settings_.threshold;
      case Signal::mean_entropy: return s.mean_entropy > settings_.threshold;
      case Signal::max_entropy: return s.max_entropy > settings_.threshold;
    }
    return false;
  }

  Settings settings_;
  sdk::ResponseCache cache_;
};

th_status route(th_instance* instance, const th_route_request* request, th_route_decision* decision, th_error* err) {
  return sdk::guard(err, [&] {
    if (request == nullptr || decision == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "router.cascade: route() got a NULL argument");
    return sdk::self<Cascade>(instance).route(*request, *decision);
  });
}

void feedback(th_instance* instance, const th_route_feedback* f) {
  if (f != nullptr) sdk::self<Cascade>(instance).feedback(*f);
}

th_status escalate(th_instance* instance, const th_route_stage* stage, int32_t* verdict, th_error* err) {
  return sdk::guard(err, [&] {
    if (stage == nullptr || stage->signal == nullptr || verdict == nullptr)
      throw Error(TH_ERR_INVALID_ARGUMENT, "router.cascade: escalate() got a NULL argument");
    *verdict = sdk::self<Cascade>(instance).escalate(*stage);
  });
}

const th_router_vtable kVtable = {
    sizeof(th_router_vtable),
    sdk::create_instance<Cascade>,
    sdk::destroy_instance<Cascade>,
    check,
    route,
    feedback,  // the cache keeps answers
    escalate,
    nullptr,  // select: it plans no ensemble
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_ROUTER,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
