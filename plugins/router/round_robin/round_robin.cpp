// router.round_robin: sends each request to the next healthy candidate in rotation.
#include <tokenhost/plugin.hpp>

#include <string>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

th_status check(const th_check_query*, th_error*) { return TH_OK; }  // serves any model anywhere

class RoundRobin {
 public:
  explicit RoundRobin(const th_create_args&) {}

  // The counter only moves past the candidate it picked, so an unhealthy candidate does not hand its
  // turn to its neighbour twice.
  th_status route(const th_route_request& request, th_route_decision& decision) {
    const uint32_t n = request.n_candidates;
    if (n == 0 || request.candidates == nullptr) {
      throw Error(TH_ERR_INVALID_ARGUMENT, "router.round_robin: the request has no candidates");
    }
    for (uint32_t step = 0; step < n; ++step) {
      const uint32_t index = uint32_t((next_ + step) % n);
      if (request.candidates[index].healthy == 0) continue;
      next_ += step + 1;
      decision.action = TH_ROUTE_TARGET;
      decision.target = index;
      decision.n_cascade = 0;
      decision.cached_text = nullptr;
      decision.cached_len = 0;
      return TH_OK;
    }
    throw Error(TH_ERR_UNSUPPORTED, "no healthy engine among " + std::to_string(n) + " candidates");
  }

 private:
  uint64_t next_ = 0;
};

th_status route(th_instance* instance, const th_route_request* request, th_route_decision* decision,
                th_error* err) {
  return sdk::guard(err, [&] {
    if (request == nullptr || decision == nullptr) {
      throw Error(TH_ERR_INVALID_ARGUMENT, "router.round_robin: route() got a NULL argument");
    }
    return sdk::self<RoundRobin>(instance).route(*request, *decision);
  });
}

const th_router_vtable kVtable = {
    sizeof(th_router_vtable),
    sdk::create_instance<RoundRobin>,
    sdk::destroy_instance<RoundRobin>,
    check,
    route,
    nullptr,  // feedback: round robin learns nothing
    nullptr,  // escalate: it plans no cascade
    nullptr,  // select: it plans no ensemble
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_ROUTER,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
