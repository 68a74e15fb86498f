// router.disaggregated: prefill/decode disaggregation (TH_ROUTE_DISAGGREGATE, ABI 1.9). A prompt of
// min_prompt_tokens or more goes to the least loaded engine whose role is prefill, for its prompt and
// first token, then to the least loaded decode engine of the same model, which loads the prompt's KV
// blocks through the connectors the two share. A shorter prompt, or a request for which no such pair
// is healthy, goes to the least loaded engine that decodes (role decode or both), else to any. With
// split off it disaggregates nothing and prefers engines whose role is both: the colocated arm of an A/B
// experiment against itself with split on.
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_route.hpp>

#include <cstring>
#include <string>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

constexpr const char* kId = TH_PLUGIN_ID;

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query != nullptr && query->config != nullptr) sdk::Config(query->config).require_int("min_prompt_tokens");
  });
}

class Disaggregated {
 public:
  explicit Disaggregated(const th_create_args& args)
      : min_prompt_(uint32_t(sdk::Config(args.config).require_int("min_prompt_tokens"))),
        split_(sdk::Config(args.config).require_bool("split")) {}

  void route(const th_route_request& r, th_route_decision& d) {
    if (r.n_candidates == 0 || r.candidates == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": the request has no candidates");
    const uint64_t turn = rotation_++;
    auto role = [&](uint32_t i) { return sdk::candidate_role(r, i); };
    if (!split_) {  // colocated: engines that do both first
      const uint32_t both = sdk::least_loaded_if(r, turn, [&](uint32_t i) { return role(i) == TH_ROLE_BOTH; });
      if (both < r.n_candidates) return sdk::set_target(d, both);
    }
    if (split_ && r.n_tokens >= min_prompt_) {
      const uint32_t prefill = sdk::least_loaded_if(r, turn, [&](uint32_t i) { return role(i) == TH_ROLE_PREFILL; });
      if (prefill < r.n_candidates) {
        const char* model = r.candidates[prefill].model;
        const uint32_t decode = sdk::least_loaded_if(
            r, turn, [&](uint32_t i) { return role(i) == TH_ROLE_DECODE && std::strcmp(r.candidates[i].model, model) == 0; });
        if (decode < r.n_candidates) return sdk::set_disaggregate(d, prefill, decode);
      }
    }
    const uint32_t decoder = sdk::least_loaded_if(r, turn, [&](uint32_t i) { return role(i) != TH_ROLE_PREFILL; });
    sdk::set_target(d, decoder < r.n_candidates ? decoder : sdk::least_loaded(r, turn));
  }

 private:
  uint32_t min_prompt_;
  bool split_;
  uint64_t rotation_ = 0;
};

const th_router_vtable kVtable = {
    sizeof(th_router_vtable),
    sdk::create_instance<Disaggregated>,
    sdk::destroy_instance<Disaggregated>,
    check,
    [](th_instance* i, const th_route_request* r, th_route_decision* d, th_error* err) {
      return sdk::guard(err, [&] {
        if (r == nullptr || d == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": route() got a NULL argument");
        sdk::self<Disaggregated>(i).route(*r, *d);
      });
    },
    nullptr,  // feedback: it learns nothing
    nullptr,  // escalate: it plans no cascade
    nullptr,  // select: it plans no ensemble
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_ROUTER, kId, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
