// router.vote: an ensemble (TH_ROUTE_ENSEMBLE). Each model among the candidates answers `samples`
// times on its least loaded healthy engine; select() keeps the majority's final answer (ties to the
// higher mean log-probability) or the answer of highest mean log-probability.
#include <tokenhost/plugin_route.hpp>

#include <map>
#include <string>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

struct Settings {
  uint32_t samples = 1;
  bool majority = true;
};

Settings read_config(const th_config* config) {
  const sdk::Config c(config);
  Settings s;
  s.samples = uint32_t(c.require_int("samples"));
  const std::string rule = c.require_string("rule");
  if (rule != "majority" && rule != "mean_logprob")
    throw Error(TH_ERR_INVALID_ARGUMENT, "router.vote: rule '" + rule + "' is neither majority nor mean_logprob");
  s.majority = rule == "majority";
  return s;
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "router.vote: check() got NULL");
    read_config(query->config);
  });
}

// The final answer as the vote compares it: its text without leading and trailing whitespace.
std::string final_answer(const th_route_answer& a) {
  std::string t(a.text != nullptr ? a.text : "", a.text != nullptr ? a.text_len : 0);
  const auto first = t.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return t.substr(first, t.find_last_not_of(" \t\r\n") - first + 1);
}

class Vote {
 public:
  explicit Vote(const th_create_args& args) : settings_(read_config(args.config)) {}

  th_status route(const th_route_request& request, th_route_decision& decision) {
    const uint32_t n = request.n_candidates;
    if (n == 0 || request.candidates == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "router.vote: the request has no candidates");
    decision.action = TH_ROUTE_ENSEMBLE;
    decision.n_cascade = 0;
    for (uint32_t i : sdk::least_loaded_per_model(request)) decision.cascade[decision.n_cascade++] = i;
    decision.n_samples = settings_.samples;
    return TH_OK;
  }

  uint32_t select(const th_route_ensemble& e) const {
    uint32_t chosen = e.n_answers;
    auto better = [&](uint32_t a, uint32_t b) { return e.answers[a].signal->mean_logprob > e.answers[b].signal->mean_logprob; };
    std::map<std::string, uint32_t> votes;
    for (uint32_t i = 0; i < e.n_answers; ++i)
      if (e.answers[i].signal->stop != TH_STOP_ERROR) ++votes[final_answer(e.answers[i])];
    for (uint32_t i = 0; i < e.n_answers; ++i) {
      if (e.answers[i].signal->stop == TH_STOP_ERROR) continue;
      if (chosen == e.n_answers) {
        chosen = i;
        continue;
      }
      const uint32_t vi = votes[final_answer(e.answers[i])], vc = votes[final_answer(e.answers[chosen])];
      if (settings_.majority && vi != vc) {
        if (vi > vc) chosen = i;
      } else if (better(i, chosen)) {
        chosen = i;
      }
    }
    if (chosen == e.n_answers) throw Error(TH_ERR_INVALID_ARGUMENT, "router.vote: every answer failed");
    return chosen;
  }

 private:
  Settings settings_;
};

th_status route(th_instance* instance, const th_route_request* request, th_route_decision* decision, th_error* err) {
  return sdk::guard(err, [&] {
    if (request == nullptr || decision == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "router.vote: route() got a NULL argument");
    return sdk::self<Vote>(instance).route(*request, *decision);
  });
}

th_status select(th_instance* instance, const th_route_ensemble* answers, uint32_t* chosen, th_error* err) {
  return sdk::guard(err, [&] {
    if (answers == nullptr || chosen == nullptr || answers->n_answers == 0)
      throw Error(TH_ERR_INVALID_ARGUMENT, "router.vote: select() got no answers");
    *chosen = sdk::self<Vote>(instance).select(*answers);
  });
}

const th_router_vtable kVtable = {
    sizeof(th_router_vtable),
    sdk::create_instance<Vote>,
    sdk::destroy_instance<Vote>,
    check,
    route,
    nullptr,  // feedback: the vote learns nothing
    nullptr,  // escalate: it plans no cascade
    select,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_ROUTER,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
