// Example plugin in C++ (the SDK's plugin.hpp helper: exceptions become statuses, a class becomes the
// instance): a router that sends each request to the healthy candidate with the fewest running plus
// waiting sequences, the lowest index on ties (so that it is deterministic).
#include <tokenhost/plugin.hpp>

namespace {
namespace sdk = tokenhost::sdk;

struct LeastLoaded {
  explicit LeastLoaded(const th_create_args&) {}
};

th_status check(const th_check_query*, th_error*) { return TH_OK; }

th_status route(th_instance*, const th_route_request* request, th_route_decision* decision, th_error* err) {
  return sdk::guard(err, [&] {
    uint32_t best = request->n_candidates;
    for (uint32_t i = 0; i < request->n_candidates; ++i) {
      const auto& c = request->candidates[i];
      if (!c.healthy) continue;
      if (best == request->n_candidates ||
          c.running + c.waiting < request->candidates[best].running + request->candidates[best].waiting)
        best = i;
    }
    if (best == request->n_candidates) throw sdk::Error(TH_ERR_UNSUPPORTED, "no healthy engine");
    decision->action = TH_ROUTE_TARGET;
    decision->target = best;
  });
}

const th_router_vtable vtable = {sizeof(th_router_vtable), sdk::create_instance<LeastLoaded>,
                                 sdk::destroy_instance<LeastLoaded>, check, route, nullptr};
const th_plugin_descriptor descriptor = {sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR,
                                         TH_KIND_ROUTER, TH_PLUGIN_ID, TH_PLUGIN_VERSION, &vtable};
}  // namespace

TOKENHOST_PLUGIN_ENTRY(descriptor)
