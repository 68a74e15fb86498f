// router.prefix_affinity: sends each request where its prompt's prefix is cached, weighed against load.
// Each healthy candidate costs prefill_weight x (prompt tokens it must prefill) + load_weight x (requests
// it has in flight); the cheapest serves. Equal costs go to the candidate with fewer requests in flight,
// then in rotation, so fresh prefixes spread like round robin over equally loaded engines.
#include <tokenhost/plugin.hpp>

#include <algorithm>
#include <string>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

struct Weights {
  double prefill;  // per prompt token left to prefill
  double load;     // per request in flight
};

Weights read_config(const th_config* config) {
  const sdk::Config c(config);
  return Weights{c.require_double("prefill_weight"), c.require_double("load_weight")};
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "router.prefix_affinity: check() got NULL");
    read_config(query->config);  // any model, any device
  });
}

class PrefixAffinity {
 public:
  explicit PrefixAffinity(const th_create_args& args) : weights_(read_config(args.config)) {}

  th_status route(const th_route_request& request, th_route_decision& decision) {
    const uint32_t n = request.n_candidates;
    if (n == 0 || request.candidates == nullptr)
      throw Error(TH_ERR_INVALID_ARGUMENT, "router.prefix_affinity: the request has no candidates");
    // The host fills cached_tokens from ABI 1.5 on; the plugin declares 1.5, so it is there, but a NULL
    // array reads as nothing cached anywhere (every candidate's cost is then its load).
    const uint32_t* cached = TH_HAS_MEMBER(&request, th_route_request, cached_tokens) ? request.cached_tokens : nullptr;
    uint32_t best = n;
    double best_cost = 0;
    for (uint32_t step = 0; step < n; ++step) {
      const uint32_t i = uint32_t((next_ + step) % n);  // rotation: the first of equals wins
      const th_route_candidate& c = request.candidates[i];
      if (c.healthy == 0) continue;
      const uint32_t hit = cached != nullptr ? std::min(cached[i], request.n_tokens) : 0;
      const double cost = weights_.prefill * double(request.n_tokens - hit) + weights_.load * double(c.running);
      if (best == n || cost < best_cost || (cost == best_cost && c.running < request.candidates[best].running)) {
        best = i;
        best_cost = cost;
      }
    }
    if (best == n) throw Error(TH_ERR_UNSUPPORTED, "no healthy engine among " + std::to_string(n) + " candidates");
    next_ = best + 1;
    decision.action = TH_ROUTE_TARGET;
    decision.target = best;
    decision.n_cascade = 0;
    decision.cached_text = nullptr;
    decision.cached_len = 0;
    return TH_OK;
  }

 private:
  Weights weights_;
  uint64_t next_ = 0;  // where the rotation among equal costs starts: just past the last pick
};

th_status route(th_instance* instance, const th_route_request* request, th_route_decision* decision, th_error* err) {
  return sdk::guard(err, [&] {
    if (request == nullptr || decision == nullptr)
      throw Error(TH_ERR_INVALID_ARGUMENT, "router.prefix_affinity: route() got a NULL argument");
    return sdk::self<PrefixAffinity>(instance).route(*request, *decision);
  });
}

const th_router_vtable kVtable = {
    sizeof(th_router_vtable),
    sdk::create_instance<PrefixAffinity>,
    sdk::destroy_instance<PrefixAffinity>,
    check,
    route,
    nullptr,  // feedback: the host's cache summaries say what it needs
    nullptr,  // escalate: it plans no cascade
    nullptr,  // select: it plans no ensemble
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_ROUTER,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
