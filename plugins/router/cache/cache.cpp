// router.cache: an exact-match response cache (sdk::ResponseCache) in front of least-loaded routing.
// A deterministic request whose prompt, parameters and namespace (API key, cache_salt) were answered
// within the TTL gets that answer again without any engine running; every other request goes to the
// healthy candidate with the fewest sequences running.
#include <tokenhost/plugin_route.hpp>

#include <string>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

sdk::ResponseCache::Limits read_config(const th_config* config) { return sdk::ResponseCache::limits_from(sdk::Config(config)); }

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "router.cache: check() got NULL");
    read_config(query->config);
  });
}

class CacheRouter {
 public:
  explicit CacheRouter(const th_create_args& args) : cache_(read_config(args.config)) {}

  th_status route(const th_route_request& request, th_route_decision& decision) {
    if (request.n_candidates == 0 || request.candidates == nullptr)
      throw Error(TH_ERR_INVALID_ARGUMENT, "router.cache: the request has no candidates");
    if (cache_.answer(request, decision)) return TH_OK;
    const uint32_t target = sdk::least_loaded(request, next_);
    next_ = target + 1;
    sdk::set_target(decision, target);
    return TH_OK;
  }
  void feedback(const th_route_feedback& f) { cache_.remember(f); }

 private:
  sdk::ResponseCache cache_;
  uint64_t next_ = 0;
};

th_status route(th_instance* instance, const th_route_request* request, th_route_decision* decision, th_error* err) {
  return sdk::guard(err, [&] {
    if (request == nullptr || decision == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "router.cache: route() got a NULL argument");
    return sdk::self<CacheRouter>(instance).route(*request, *decision);
  });
}

void feedback(th_instance* instance, const th_route_feedback* f) {
  if (f != nullptr) sdk::self<CacheRouter>(instance).feedback(*f);
}

const th_router_vtable kVtable = {
    sizeof(th_router_vtable),
    sdk::create_instance<CacheRouter>,
    sdk::destroy_instance<CacheRouter>,
    check,
    route,
    feedback,  // answers to keep
    nullptr,   // escalate: it plans no cascade
    nullptr,   // select: it plans no ensemble
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_ROUTER,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
