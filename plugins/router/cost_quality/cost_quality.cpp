// router.cost_quality: per request, the cheapest model whose declared quality meets what the request
// needs. A request's difficulty (0..1) is its prompt's length over long_prompt_tokens, or 1 or 0 for
// the classes named hard or easy; it needs min_quality + difficulty x (max_quality - min_quality).
// Among the models that have it, each one's declared cost is weighed by its measured latency (seconds
// per generated token, a moving average from feedback). A payer that spent its budget in the last
// minute gets the cheapest model whatever its request needs. Within a model the least loaded engine
// serves.
#include <tokenhost/plugin_route.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;
using Clock = std::chrono::steady_clock;

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);) {
    const auto a = part.find_first_not_of(' '), b = part.find_last_not_of(' ');
    if (a != std::string::npos) out.push_back(part.substr(a, b - a + 1));
  }
  return out;
}

struct Settings {
  double min_quality = 0, max_quality = 1;
  uint32_t long_prompt = 512;
  std::set<std::string> hard, easy;
  double latency_weight = 0;
  double budget = 0;
  std::map<std::string, double> budgets;
};

Settings read_config(const th_config* config) {
  const sdk::Config c(config);
  Settings s;
  s.min_quality = c.require_double("min_quality");
  s.max_quality = c.require_double("max_quality");
  if (s.max_quality < s.min_quality) throw Error(TH_ERR_INVALID_ARGUMENT, "router.cost_quality: max_quality is below min_quality");
  s.long_prompt = uint32_t(c.require_int("long_prompt_tokens"));
  for (const auto& k : split(c.require_string("hard_classes"), ',')) s.hard.insert(k);
  for (const auto& k : split(c.require_string("easy_classes"), ',')) s.easy.insert(k);
  s.latency_weight = c.require_double("latency_weight");
  s.budget = c.require_double("budget_per_minute");
  for (const auto& pair : split(c.require_string("budgets"), ',')) {
    const auto eq = pair.find('=');
    if (eq == std::string::npos) throw Error(TH_ERR_INVALID_ARGUMENT, "router.cost_quality: budgets entry '" + pair + "' is not PAYER=COST");
    try {
      s.budgets[split(pair.substr(0, eq), ' ').at(0)] = std::stod(pair.substr(eq + 1));
    } catch (const std::exception&) {
      throw Error(TH_ERR_INVALID_ARGUMENT, "router.cost_quality: budgets entry '" + pair + "' has no number after '='");
    }
  }
  return s;
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "router.cost_quality: check() got NULL");
    read_config(query->config);
  });
}

class CostQuality {
 public:
  explicit CostQuality(const th_create_args& args) : s_(read_config(args.config)) {}

  th_status route(const th_route_request& request, th_route_decision& decision) {
    if (request.n_candidates == 0 || request.candidates == nullptr)
      throw Error(TH_ERR_INVALID_ARGUMENT, "router.cost_quality: the request has no candidates");
    const bool v17 = TH_HAS_MEMBER(&request, th_route_request, payer);
    const std::string payer = v17 && request.payer != nullptr ? request.payer : "";
    const std::string klass = v17 && request.request_class != nullptr ? request.request_class : "";
    const std::vector<uint32_t> models = sdk::least_loaded_per_model(request);
    auto cost = [&](uint32_t i) { return request.candidates[i].cost_per_mtok; };
    uint32_t chosen = *std::min_element(models.begin(), models.end(), [&](uint32_t a, uint32_t b) { return cost(a) < cost(b); });
    if (!over_budget(payer, Clock::now())) {
      const double needed = s_.min_quality + difficulty(request.n_tokens, klass) * (s_.max_quality - s_.min_quality);
      double best = -1;
      uint32_t fallback = models[0];  // none good enough: the best quality there is
      for (uint32_t i : models) {
        const th_route_candidate& c = request.candidates[i];
        if (c.quality > request.candidates[fallback].quality) fallback = i;
        if (c.quality < needed) continue;
        const double weighed = c.cost_per_mtok * (1.0 + s_.latency_weight * latency(c.model));
        if (best < 0 || weighed < best) {
          best = weighed;
          chosen = i;
        }
      }
      if (best < 0) chosen = fallback;
    }
    sdk::set_target(decision, chosen);
    return TH_OK;
  }

  void feedback(const th_route_feedback& f) {
    if (!TH_HAS_MEMBER(&f, th_route_feedback, signal) || f.ok == 0 || f.cached != 0) return;
    if (f.tokens_out > 0 && f.engine_id != nullptr) {
      auto model = model_of_.find(f.engine_id);
      if (model != model_of_.end()) {
        double& avg = latency_[model->second];
        const double sample = f.total_s / double(f.tokens_out);
        avg = avg == 0 ? sample : 0.8 * avg + 0.2 * sample;
      }
    }
    if (f.request_id != 0) {
      auto p = payer_of_.find(f.request_id);
      if (p != payer_of_.end()) {
        if (!p->second.empty()) spent_[p->second].push_back({Clock::now(), f.cost});
        payer_of_.erase(p);
      }
    }
  }

  // What route() remembers for feedback: each engine's model, each request's payer.
  void note(const th_route_request& request) {
    for (uint32_t i = 0; i < request.n_candidates; ++i) model_of_[request.candidates[i].engine_id] = request.candidates[i].model;
    if (TH_HAS_MEMBER(&request, th_route_request, payer) && request.payer != nullptr && request.payer[0] != '\0') {
      payer_of_[request.request_id] = request.payer;
      if (payer_of_.size() > 100000) payer_of_.erase(payer_of_.begin());  // answers that never came back
    }
  }

 private:
  double difficulty(uint32_t n_tokens, const std::string& klass) const {
    if (!klass.empty() && s_.hard.count(klass)) return 1.0;
    if (!klass.empty() && s_.easy.count(klass)) return 0.0;
    return std::min(1.0, double(n_tokens) / double(s_.long_prompt));
  }
  double latency(const std::string& model) const {
    auto it = latency_.find(model);
    return it == latency_.end() ? 0.0 : it->second;
  }
  bool over_budget(const std::string& payer, Clock::time_point now) {
    if (payer.empty()) return false;
    auto b = s_.budgets.find(payer);
    const double budget = b != s_.budgets.end() ? b->second : s_.budget;
    if (budget <= 0) return false;
    auto& spent = spent_[payer];
    while (!spent.empty() && now - spent.front().first > std::chrono::seconds(60)) spent.pop_front();
    double sum = 0;
    for (const auto& [at, cost] : spent) sum += cost;
    return sum >= budget;
  }

  Settings s_;
  std::map<std::string, std::string> model_of_;  // engine -> model
  std::map<std::string, double> latency_;        // model -> seconds per generated token
  std::map<uint64_t, std::string> payer_of_;     // request in flight -> payer
  std::map<std::string, std::deque<std::pair<Clock::time_point, double>>> spent_;  // payer -> last minute's costs
};

th_status route(th_instance* instance, const th_route_request* request, th_route_decision* decision, th_error* err) {
  return sdk::guard(err, [&] {
    if (request == nullptr || decision == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "router.cost_quality: route() got a NULL argument");
    auto& self = sdk::self<CostQuality>(instance);
    self.note(*request);
    return self.route(*request, *decision);
  });
}

void feedback(th_instance* instance, const th_route_feedback* f) {
  if (f != nullptr) sdk::self<CostQuality>(instance).feedback(*f);
}

const th_router_vtable kVtable = {
    sizeof(th_router_vtable),
    sdk::create_instance<CostQuality>,
    sdk::destroy_instance<CostQuality>,
    check,
    route,
    feedback,  // latency and spending
    nullptr,   // escalate: it plans no cascade
    nullptr,   // select: it plans no ensemble
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_ROUTER,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
