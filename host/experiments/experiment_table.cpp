#include "experiments/experiment_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "util/text.hpp"

namespace tokenhost::experiments {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// A time the arm's engine was down: its requests went to the other arms.
struct ArmGap {
  int64_t from_unix = 0, to_unix = 0;  // to_unix 0: still down
  std::string reason;
  uint64_t displaced = 0;  // requests assigned to the arm that another arm served
};

struct ArmStats {
  uint64_t requests = 0, failed = 0, tokens_out = 0;  // compared requests
  uint64_t held_back = 0, chosen = 0;                 // served, not compared
  uint64_t served_for_down_arms = 0;                  // served in place of an arm whose engine was down
  uint64_t cached = 0;  // compared requests a router's cache answered (out of the latency samples)
  double cost = 0;      // the cost the router accounted for the compared requests
  Sample ttft, itl, e2e;
  std::vector<ArmGap> gaps;
  bool down() const { return !gaps.empty() && gaps.back().to_unix == 0; }
};

// The metrics compared between arms; lower is better for each.
struct MetricDef {
  const char* name;
  Sample ArmStats::*sample;
};
constexpr MetricDef kMetrics[] = {{"ttft_s", &ArmStats::ttft}, {"itl_s", &ArmStats::itl}, {"e2e_s", &ArmStats::e2e}};

json gaps_json(const std::vector<ArmGap>& gaps) {
  json out = json::array();
  for (const auto& g : gaps)
    out.push_back({{"from_unix", g.from_unix},
                   {"to_unix", g.to_unix != 0 ? json(g.to_unix) : json(nullptr)},
                   {"reason", g.reason},
                   {"displaced_requests", g.displaced}});
  return out;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string percent_text(double ratio) {
  const double pct = std::fabs(ratio - 1.0) * 100.0;
  char buf[32];
  std::snprintf(buf, sizeof buf, pct >= 10 ? "%.0f" : "%.1f", pct);
  return buf;
}

json summary_json(const Sample& s) {
  Summary m = summarize(s);
  json ci = m.ci95 ? json::array({m.ci95->first, m.ci95->second}) : json(nullptr);
  auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  return {{"n", m.n}, {"mean", m.n ? num(m.mean) : json(nullptr)}, {"ci95", ci}, {"p50", num(m.p50)}, {"p99", num(m.p99)}};
}

constexpr const char* kPluginPrefix = "tokenhost_plugin_";

// How much an arm's engine computed over the experiment, from its step metrics (deltas since the
// start). Arms on one machine share its cores, and each engine batches only its own requests: an arm
// that carries more requests runs bigger, slower steps, and its latencies show its load as well as its
// technique. These say how far the arms' loads differed.
json load_json(const std::map<std::string, double>& delta) {
  auto get = [&](const char* key) {
    auto it = delta.find(key);
    return it == delta.end() ? 0.0 : it->second;
  };
  const double steps = get("tokenhost_step_seconds_count"), seconds = get("tokenhost_step_seconds_sum");
  const double tokens = get("tokenhost_step_tokens_total");
  auto ratio = [](double a, double b) { return b > 0 ? json(a / b) : json(nullptr); };
  return {{"steps", uint64_t(steps)},
          {"tokens", uint64_t(tokens)},
          {"tokens_per_step", ratio(tokens, steps)},
          {"step_s_mean", ratio(seconds, steps)},
          {"step_s_per_token", ratio(seconds, tokens)},
          {"engine_tok_s", ratio(tokens, seconds)}};  // tokens per second of the engine's own step time
}

// What an arm's engine speculated over the experiment (deltas of its tokenhost_spec_* series, summed
// over proposers): drafts verified, their tokens, those accepted, and the rates that compare arms.
json speculation_json(const std::map<std::string, double>& delta) {
  double drafts = 0, drafted = 0, accepted = 0;
  for (const auto& [key, v] : delta) {
    if (key.rfind("tokenhost_spec_accepted_length_count", 0) == 0) drafts += v;
    else if (key.rfind("tokenhost_spec_draft_tokens_total", 0) == 0) drafted += v;
    else if (key.rfind("tokenhost_spec_accepted_tokens_total", 0) == 0) accepted += v;
  }
  auto ratio = [](double a, double b) { return b > 0 ? json(a / b) : json(nullptr); };
  return {{"drafts", uint64_t(drafts)},
          {"draft_tokens", uint64_t(drafted)},
          {"accepted_tokens", uint64_t(accepted)},
          {"acceptance", ratio(accepted, drafted)},
          {"accepted_per_draft", ratio(accepted, drafts)}};
}

// What an arm's engine reused of its prompts over the experiment (deltas of tokenhost_prefix_*): prompts
// looked up in its prefix cache, those that found a prefix, the prompt tokens served from it.
json prefix_cache_json(const std::map<std::string, double>& delta) {
  auto get = [&](const char* key) {
    auto it = delta.find(key);
    return it == delta.end() ? 0.0 : it->second;
  };
  const double lookups = get("tokenhost_prefix_lookups_total"), hits = get("tokenhost_prefix_hits_total");
  return {{"lookups", uint64_t(lookups)},
          {"hits", uint64_t(hits)},
          {"cached_tokens", uint64_t(get("tokenhost_prefix_cached_tokens_total"))},
          {"hit_rate", lookups > 0 ? json(hits / lookups) : json(nullptr)}};
}

// What an arm's engine moved through its KV connectors over the experiment (deltas of
// tokenhost_kv_connector_*, every tier summed): blocks and bytes saved and loaded, prompts that found
// blocks in a tier, loads that failed, and the mean time a load took.
json kv_connectors_json(const std::map<std::string, double>& delta) {
  auto sum = [&](const std::string& family) {
    double total = 0;
    for (const auto& [key, v] : delta)
      if (key.rfind(family, 0) == 0 && (key.size() == family.size() || key[family.size()] == '{')) total += v;
    return total;
  };
  const double hits = sum("tokenhost_kv_connector_hits_total"), seconds = sum("tokenhost_kv_connector_load_seconds_total");
  return {{"saved_blocks", uint64_t(sum("tokenhost_kv_connector_saved_blocks_total"))},
          {"saved_bytes", uint64_t(sum("tokenhost_kv_connector_saved_bytes_total"))},
          {"loaded_blocks", uint64_t(sum("tokenhost_kv_connector_loaded_blocks_total"))},
          {"loaded_bytes", uint64_t(sum("tokenhost_kv_connector_loaded_bytes_total"))},
          {"hits", uint64_t(hits)},
          {"load_failures", uint64_t(sum("tokenhost_kv_connector_load_failures_total"))},
          {"mean_load_seconds", hits > 0 ? json(seconds / hits) : json(nullptr)}};
}

}  // namespace

struct Experiment {
  ExperimentSpec spec;
  std::string model;
  bool running = true;
  int64_t started_unix = 0;
  Clock::time_point started, stopped;
  std::vector<ArmStats> arms;
  std::vector<std::shared_ptr<PluginInstance>> routers;  // router arms: each arm's instance
  std::vector<MetricValues> metrics_at_start, metrics_at_stop;  // per arm
  // Requests without a key take buckets along a golden-ratio sequence from a random start: any run of
  // them splits within a request or two of the arms' percentages, where independent draws drift by
  // ~sqrt(n) (64 requests at 50/50 came out 25/39), and an arm with more requests runs bigger steps.
  uint64_t keyless = 0;  // keyless requests routed so far (under the table's mutex)
  double keyless_start = 0;
};

ExperimentTable::ExperimentTable(MetricReader read_metrics) : read_metrics_(std::move(read_metrics)) {}

std::shared_ptr<Experiment> ExperimentTable::find_locked(const std::string& name) const {
  for (const auto& e : experiments_)
    if (e->spec.name == name) return e;
  return nullptr;
}

std::optional<Problem> ExperimentTable::start(const ExperimentSpec& spec, const std::string& model,
                                              std::vector<std::shared_ptr<PluginInstance>> routers) {
  auto x = std::make_shared<Experiment>();
  x->spec = spec;
  x->routers = std::move(routers);
  std::mt19937_64 rng{std::random_device{}()};
  x->keyless_start = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  x->model = model;
  x->started_unix = unix_now();
  x->started = Clock::now();
  x->arms.resize(spec.arms.size());
  for (const auto& arm : spec.arms) x->metrics_at_start.push_back(read_metrics_ ? read_metrics_(arm.engine) : MetricValues{});
  std::lock_guard lock(mutex_);
  if (auto taken = name_taken_locked(spec.name)) return taken;
  experiments_.push_back(std::move(x));
  return std::nullopt;
}

std::optional<Problem> ExperimentTable::name_taken_locked(const std::string& name) const {
  if (auto old = find_locked(name))
    return Problem{{"name"}, "experiment '" + name + "' exists already (" + (old->running ? "running" : "stopped, its report kept") +
                                 "); choose another name", 409};
  return std::nullopt;
}

std::optional<Problem> ExperimentTable::name_taken(const std::string& name) const {
  std::lock_guard lock(mutex_);
  return name_taken_locked(name);
}

std::vector<Problem> ExperimentTable::change(const std::string& name, const json& body, const std::vector<EngineView>& engines) {
  std::lock_guard lock(mutex_);
  auto x = find_locked(name);
  if (!x || !x->running) return {{{}, x ? "experiment '" + name + "' is stopped" : "no running experiment '" + name + "'", x ? 409 : 404}};
  auto changed = apply_change(x->spec, body);
  if (auto* problems = std::get_if<std::vector<Problem>>(&changed)) return *problems;
  auto spec = std::get<ExperimentSpec>(changed);
  auto problems = validate(spec, engines);
  if (problems.empty()) x->spec = std::move(spec);
  return problems;
}

std::optional<Problem> ExperimentTable::stop(const std::string& name) {
  std::shared_ptr<Experiment> x;
  {
    std::lock_guard lock(mutex_);
    x = find_locked(name);
    if (!x || !x->running) return Problem{{}, x ? "experiment '" + name + "' is already stopped" : "no experiment '" + name + "'", x ? 409 : 404};
    x->running = false;
    x->stopped = Clock::now();
    // Its router arms' instances plan no more requests: they go (their libraries with them) once the
    // requests they planned are answered, which hold them meanwhile.
    x->routers.clear();
  }
  std::vector<MetricValues> at_stop;
  for (const auto& arm : x->spec.arms) at_stop.push_back(read_metrics_ ? read_metrics_(arm.engine) : MetricValues{});
  std::lock_guard lock(mutex_);
  x->metrics_at_stop = std::move(at_stop);
  return std::nullopt;
}

std::vector<EngineView> ExperimentTable::engine_views(const std::map<std::string, std::string>& engine_models) const {
  std::vector<EngineView> out;
  for (const auto& [name, model] : engine_models) out.push_back({name, model, experiment_of_engine(name)});
  return out;
}

std::vector<std::string> ExperimentTable::running_on_model(const std::string& model) const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& x : experiments_)
    if (x->running && x->model == model) out.push_back(x->spec.name);
  return out;
}

std::string ExperimentTable::experiment_of_engine(const std::string& engine) const {
  std::lock_guard lock(mutex_);
  for (const auto& x : experiments_)
    if (x->running)
      for (const auto& a : x->spec.arms)
        if (a.engine == engine) return x->spec.name;
  return "";
}

namespace {

const Experiment* running_for(const std::vector<std::shared_ptr<Experiment>>& all, const std::string& model) {
  for (const auto& x : all)
    if (x->running && x->model == model) return x.get();
  return nullptr;
}

std::string choice_problem(const Experiment* x, const std::string& model, const std::string& arm) {
  if (x == nullptr) return "model '" + model + "' has no running experiment, so there is no arm '" + arm + "' to choose";
  if (!x->spec.allow_request_choice)
    return "experiment '" + x->spec.name + "' does not let a request choose its arm (allow_request_choice is false)";
  std::vector<std::string> names;
  for (const auto& a : x->spec.arms)
    if (a.name == arm) return "";
    else names.push_back(a.name);
  return "experiment '" + x->spec.name + "' has no arm '" + arm + "'" + suggestion(arm, names);
}

}  // namespace

std::string ExperimentTable::check_choice(const std::string& model, const std::string& arm) const {
  std::lock_guard lock(mutex_);
  return choice_problem(running_for(experiments_, model), model, arm);
}

std::variant<std::monostate, Routing, std::string> ExperimentTable::route(const RequestKeys& keys) const {
  std::lock_guard lock(mutex_);
  std::shared_ptr<Experiment> x;
  for (const auto& e : experiments_)
    if (e->running && e->model == keys.model) x = e;
  if (!x) {
    if (!keys.arm.empty()) return choice_problem(nullptr, keys.model, keys.arm);
    return std::monostate{};
  }
  Routing r;
  r.experiment = x;
  if (!keys.arm.empty()) {
    std::string problem = choice_problem(x.get(), keys.model, keys.arm);
    if (!problem.empty()) return problem;
    for (size_t i = 0; i < x->spec.arms.size(); ++i)
      if (x->spec.arms[i].name == keys.arm) r.arm = i;
    r.engine = x->spec.arms[r.arm].engine;
    if (r.arm < x->routers.size()) r.router = x->routers[r.arm];
    r.kind = Routing::Kind::chosen;
    return r;
  }
  const std::string& key = x->spec.sticky_key == StickyKey::session ? keys.session
                           : x->spec.sticky_key == StickyKey::user  ? keys.user
                           : x->spec.sticky_key == StickyKey::api_key ? keys.api_key
                                                                      : std::string();
  uint32_t bucket;
  if (key.empty()) {
    double f = x->keyless_start + double(x->keyless++) * 0.6180339887498949;  // 1 / golden ratio
    f -= std::floor(f);
    bucket = std::min<uint32_t>(99, uint32_t(f * 100.0));
  } else {
    bucket = bucket_of(x->spec.name, key);
  }
  Assignment a = assign(x->spec, bucket, keys.request_class);
  r.arm = a.arm;
  r.kind = a.held_back ? Routing::Kind::held_back : Routing::Kind::compared;
  if (x->arms[a.arm].down()) {  // its share goes to the arms that are up, in their proportions
    std::vector<bool> down;
    for (const auto& arm : x->arms) down.push_back(arm.down());
    const size_t instead = assign(x->spec, bucket, keys.request_class, down).arm;
    if (instead != a.arm) {
      ++x->arms[a.arm].gaps.back().displaced;
      r.arm = instead;
      r.kind = Routing::Kind::displaced;
    }
  }
  r.engine = x->spec.arms[r.arm].engine;
  if (r.arm < x->routers.size()) r.router = x->routers[r.arm];
  return r;
}

void ExperimentTable::engine_down(const std::string& engine, const std::string& reason) {
  std::lock_guard lock(mutex_);
  for (const auto& x : experiments_) {
    if (!x->running) continue;
    for (size_t i = 0; i < x->spec.arms.size(); ++i)
      if (x->spec.arms[i].engine == engine && !x->arms[i].down()) x->arms[i].gaps.push_back(ArmGap{unix_now(), 0, reason, 0});
  }
}

void ExperimentTable::engine_up(const std::string& engine) {
  std::lock_guard lock(mutex_);
  for (const auto& x : experiments_)
    for (size_t i = 0; i < x->spec.arms.size(); ++i)
      if (x->spec.arms[i].engine == engine && x->arms[i].down()) x->arms[i].gaps.back().to_unix = unix_now();
}

void ExperimentTable::record(const Routing& routing, const Outcome& o) {
  if (!routing.experiment) return;
  std::lock_guard lock(mutex_);
  ArmStats& s = routing.experiment->arms.at(routing.arm);
  if (routing.kind == Routing::Kind::held_back) {
    ++s.held_back;
    return;
  }
  if (routing.kind == Routing::Kind::chosen) {
    ++s.chosen;
    return;
  }
  if (routing.kind == Routing::Kind::displaced) {
    ++s.served_for_down_arms;
    return;
  }
  ++s.requests;
  if (o.failed) ++s.failed;
  s.tokens_out += o.tokens_out;
  s.cost += o.cost;
  if (o.cached) ++s.cached;
  if (o.failed || o.cached) return;  // a cached answer's latency is no engine's: compared apart
  if (o.ttft_s) s.ttft.add(*o.ttft_s);
  if (o.itl_s) s.itl.add(*o.itl_s);
  if (o.completed && o.e2e_s) s.e2e.add(*o.e2e_s);
}

json ExperimentTable::list() const {
  std::lock_guard lock(mutex_);
  json out = json::array();
  for (const auto& x : experiments_) {
    json arms = json::array();
    for (const auto& a : x->spec.arms) {
      json arm = {{"name", a.name}, {"engine", a.engine}, {"percent", a.percent}, {"holdback_classes", a.holdback_classes}};
      if (!a.router.empty()) {
        arm[router_arm_key()] = a.router;
        arm["config"] = a.router_config;
      }
      arms.push_back(std::move(arm));
    }
    out.push_back({{"name", x->spec.name},
                   {"state", x->running ? "running" : "stopped"},
                   {"model", x->model},
                   {"sticky_key", sticky_key_name(x->spec.sticky_key)},
                   {"started_unix", x->started_unix},
                   {"arms", arms},
                   {"allow_request_choice", x->spec.allow_request_choice},
                   {"min_samples", x->spec.min_samples}});
  }
  return {{"experiments", out}};
}

std::optional<json> ExperimentTable::report(const std::string& name) const {
  std::shared_ptr<Experiment> x;
  {
    std::lock_guard lock(mutex_);
    x = find_locked(name);
    if (!x) return std::nullopt;
  }
  // Plugin metrics are read outside the table's lock (the registry has its own).
  std::vector<MetricValues> now;
  bool running;
  {
    std::lock_guard lock(mutex_);
    running = x->running;
  }
  if (running)
    for (const auto& arm : x->spec.arms) now.push_back(read_metrics_ ? read_metrics_(arm.engine) : MetricValues{});
  std::lock_guard lock(mutex_);
  if (!running) now = x->metrics_at_stop;
  const double elapsed = std::chrono::duration<double>((x->running ? Clock::now() : x->stopped) - x->started).count();
  json arms = json::array();
  for (size_t i = 0; i < x->spec.arms.size(); ++i) {
    const ArmSpec& spec = x->spec.arms[i];
    const ArmStats& s = x->arms[i];
    json plugin = json::object();
    std::map<std::string, double> step;
    if (i < now.size())
      for (const auto& [key, v] : now[i]) {
        double value = v.value;
        if (v.cumulative) {  // counters and histogram counts/sums: what the experiment added
          auto start = x->metrics_at_start[i].find(key);
          if (start != x->metrics_at_start[i].end()) value -= start->second.value;
        }
        if (key.rfind(kPluginPrefix, 0) == 0)
          plugin[key] = value;
        else
          step[key] = value;
      }
    json a = {{"name", spec.name},
              {"engine", spec.engine},
              {"percent", spec.percent},
              {"requests", s.requests},
              {"cached", s.cached},
              {"cost", s.cost},
              {"failed", s.failed},
              {"held_back", s.held_back},
              {"chosen", s.chosen},
              {"served_for_down_arms", s.served_for_down_arms},
              {"down", s.down()},
              {"gaps", gaps_json(s.gaps)},
              {"tokens_out", s.tokens_out},
              {"throughput_tok_s", elapsed > 0 ? double(s.tokens_out) / elapsed : 0.0},
              {"load", load_json(step)},
              {"speculation", speculation_json(step)},
              {"prefix_cache", prefix_cache_json(step)},
              {"kv_connectors", kv_connectors_json(step)},
              {"plugin_metrics", plugin}};
    for (const auto& m : kMetrics) a[m.name] = summary_json(s.*m.sample);
    if (!spec.router.empty()) {
      a[router_arm_key()] = spec.router;
      a["config"] = spec.router_config;
    }
    arms.push_back(std::move(a));
  }
  json comparisons = json::array();
  const ArmStats& base = x->arms[0];
  for (size_t i = 1; i < x->arms.size(); ++i) {
    const std::string& cand = x->spec.arms[i].name;
    for (const auto& m : kMetrics) {
      const Sample& a = base.*m.sample;
      const Sample& b = x->arms[i].*m.sample;
      Comparison c = welch(a, b, x->spec.min_samples);
      const uint64_t n = std::min(a.n(), b.n());
      // Per arm, for a verdict: the minimum, or as many as the observed difference needs.
      const uint64_t needed = c.significant ? 0 : std::max<uint64_t>(x->spec.min_samples, c.needed_per_arm);
      std::string verdict;
      if (c.significant)
        verdict = cand + (c.diff < 0 ? " is faster (" : " is slower (") + m.name + " " + percent_text(c.ratio) +
                  (c.diff < 0 ? "% lower)" : "% higher)");
      else if (!c.enough)
        verdict = "no significant difference yet (n=" + std::to_string(n) + "/" + std::to_string(needed) + ")";
      else if (c.needed_per_arm > 0)
        verdict = "no significant difference yet (n=" + std::to_string(n) + "/" + std::to_string(c.needed_per_arm) +
                  ": about that many per arm would show a difference of this size)";
      else
        verdict = "no difference (n=" + std::to_string(n) + ")";
      auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
      comparisons.push_back({{"metric", m.name},
                             {"baseline", x->spec.arms[0].name},
                             {"candidate", cand},
                             {"baseline_n", a.n()},
                             {"candidate_n", b.n()},
                             {"diff", num(c.diff)},
                             {"ratio", num(c.ratio)},
                             {"ci95", json::array({num(c.ci_lo), num(c.ci_hi)})},
                             {"p_value", num(c.p_value)},
                             {"significant", c.significant},
                             {"samples_needed_per_arm", needed ? json(needed) : json(nullptr)},
                             {"more_samples_needed", needed > n ? needed - n : 0},
                             {"verdict", verdict}});
    }
  }
  // Loads that confound latency: an arm whose steps carry much more (or less) than the baseline's runs
  // slower (faster) steps for that alone. And throughput_tok_s follows the split, not the technique.
  json notes = json::array();
  constexpr double kLoadRatio = 1.25;
  const json& base_load = arms[0]["load"];
  for (size_t i = 1; i < arms.size(); ++i) {
    const json &b = base_load["tokens_per_step"], &c = arms[i]["load"]["tokens_per_step"];
    if (!b.is_number() || !c.is_number() || b.get<double>() <= 0 || c.get<double>() <= 0) continue;
    const double r = c.get<double>() / b.get<double>();
    if (r < kLoadRatio && 1 / r < kLoadRatio) continue;
    char text[400];
    std::snprintf(text, sizeof text,
                  "arm %s's steps carried %.2fx the tokens of arm %s's (%.1f against %.1f per step): its latencies show "
                  "that load as well as its technique; compare load.engine_tok_s and load.step_s_per_token",
                  x->spec.arms[i].name.c_str(), r, x->spec.arms[0].name.c_str(), c.get<double>(), b.get<double>());
    notes.push_back(text);
  }
  return json{{"name", x->spec.name},
              {"state", x->running ? "running" : "stopped"},
              {"notes", notes},
              {"model", x->model},
              {"elapsed_s", elapsed},
              {"min_samples", x->spec.min_samples},
              {"arms", arms},
              {"comparisons", comparisons}};
}

std::vector<ExperimentSpec> ExperimentTable::running_specs() const {
  std::lock_guard lock(mutex_);
  std::vector<ExperimentSpec> out;
  for (const auto& x : experiments_)
    if (x->running) out.push_back(x->spec);
  return out;
}

std::map<std::string, std::vector<std::string>> ExperimentTable::arm_labels() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& x : experiments_)
    if (x->running)
      for (const auto& a : x->spec.arms) out[a.engine] = {x->spec.name, a.name};
  return out;
}

}  // namespace tokenhost::experiments
