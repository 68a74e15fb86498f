#include "experiments/experiment.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "util/text.hpp"

namespace tokenhost::experiments {

const char* sticky_key_name(StickyKey key) {
  switch (key) {
    case StickyKey::session: return "session";
    case StickyKey::user: return "user";
    case StickyKey::api_key: return "api_key";
    case StickyKey::none: return "none";
  }
  return "none";
}

std::optional<StickyKey> sticky_key_from_name(const std::string& name) {
  for (StickyKey k : {StickyKey::session, StickyKey::user, StickyKey::api_key, StickyKey::none})
    if (name == sticky_key_name(k)) return k;
  return std::nullopt;
}

std::string path_text(const std::vector<std::string>& path) {
  std::string out;
  for (const auto& p : path) {
    if (!p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; })) out += "[" + p + "]";
    else out += (out.empty() ? "" : ".") + p;
  }
  return out;
}

namespace {

bool valid_name(const std::string& s) {
  return !s.empty() && s.size() <= 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}

// Classes some arm holds back, with the arms that still serve each.
std::map<std::string, std::vector<size_t>> serving_arms(const ExperimentSpec& spec) {
  std::map<std::string, std::vector<size_t>> out;
  for (const auto& arm : spec.arms)
    for (const auto& c : arm.holdback_classes) out[c];
  for (auto& [c, arms] : out)
    for (size_t i = 0; i < spec.arms.size(); ++i) {
      const auto& h = spec.arms[i].holdback_classes;
      if (std::find(h.begin(), h.end(), c) == h.end()) arms.push_back(i);
    }
  return out;
}

}  // namespace

std::vector<Problem> validate(const ExperimentSpec& spec, const std::vector<EngineView>& engines,
                              const std::vector<std::string>& running_on_model) {
  std::vector<Problem> out;
  auto add = [&](std::vector<std::string> path, std::string message, int status = 400) {
    out.push_back({std::move(path), std::move(message), status});
  };
  if (!valid_name(spec.name))
    add({"name"}, "experiment name '" + spec.name + "' must be 1-64 letters, digits, '_' or '-'");
  if (spec.arms.size() < 2) add({"arms"}, "an experiment needs at least two arms, got " + std::to_string(spec.arms.size()));
  if (spec.min_samples < 2) add({"min_samples"}, "min_samples must be at least 2 (a variance needs two samples)");
  std::set<std::string> arm_names, engine_names;
  std::string model;
  int total = 0;
  std::vector<std::string> known;
  for (const auto& e : engines) known.push_back(e.name);
  for (size_t i = 0; i < spec.arms.size(); ++i) {
    const ArmSpec& a = spec.arms[i];
    const std::string at = std::to_string(i);
    if (!valid_name(a.name)) add({"arms", at, "name"}, "arm name '" + a.name + "' must be 1-64 letters, digits, '_' or '-'");
    else if (!arm_names.insert(a.name).second) add({"arms", at, "name"}, "arm name '" + a.name + "' is used twice");
    if (a.percent < 0 || a.percent > 100)
      add({"arms", at, "percent"}, "arm '" + a.name + "': percent must be 0-100, got " + std::to_string(a.percent));
    total += a.percent;
    for (size_t k = 0; k < a.holdback_classes.size(); ++k)
      if (!valid_name(a.holdback_classes[k]))
        add({"arms", at, "holdback_classes", std::to_string(k)},
            "request class '" + a.holdback_classes[k] + "' must be 1-64 letters, digits, '_' or '-'");
    if (!a.router.empty()) {
      if (!a.engine.empty()) add({"arms", at, "engine"}, "arm '" + a.name + "' names an engine and a router; an arm is one or the other");
      if (spec.arms[0].router.empty()) add({"arms", at, router_arm_key()}, "arm '" + a.name + "' is a router, the first arm an engine: arms are all engines or all routers");
      continue;
    }
    if (!spec.arms[0].router.empty()) {
      add({"arms", at, "engine"}, "arm '" + a.name + "' is an engine, the first arm a router: arms are all engines or all routers");
      continue;
    }
    auto e = std::find_if(engines.begin(), engines.end(), [&](const EngineView& v) { return v.name == a.engine; });
    if (e == engines.end()) {
      add({"arms", at, "engine"}, "arm '" + a.name + "': no engine '" + a.engine + "'" + suggestion(a.engine, known), 404);
      continue;
    }
    if (!engine_names.insert(a.engine).second)
      add({"arms", at, "engine"}, "arm '" + a.name + "': engine '" + a.engine + "' is already another arm of this experiment");
    if (model.empty()) model = e->model;
    else if (e->model != model)
      add({"arms", at, "engine"}, "arm '" + a.name + "': engine '" + a.engine + "' serves model '" + e->model +
                                      "', the first arm's engine serves '" + model + "'; arms must serve one model");
    if (!e->experiment.empty() && e->experiment != spec.name)
      add({"arms", at, "engine"}, "arm '" + a.name + "': engine '" + a.engine + "' is an arm of running experiment '" +
                                      e->experiment + "'; stop it first", 409);
  }
  if (!spec.arms.empty() && !spec.arms[0].router.empty()) {
    if (spec.model.empty()) add({"model"}, "an experiment between routers names the model (or group) it splits: 'model'");
    model = spec.model;
  } else if (!spec.model.empty() && !model.empty() && spec.model != model) {
    add({"model"}, "'model' is '" + spec.model + "' but the arms' engines serve '" + model + "'");
  }
  if (!spec.arms.empty() && total != 100)
    add({"arms"}, "the arms' percents sum to " + std::to_string(total) + "; they must sum to 100");
  for (const auto& [c, arms] : serving_arms(spec)) {
    int served = 0;
    for (size_t i : arms) served += spec.arms[i].percent;
    if (served == 0)
      add({"arms"}, "request class '" + c + "' is held back from every arm" + (arms.empty() ? "" : " with traffic") +
                        "; at least one arm with a percent above 0 must serve it");
  }
  for (const auto& other : running_on_model)
    if (other != spec.name)
      add({}, "model '" + model + "' already has running experiment '" + other + "'; stop it first (one experiment per model)", 409);
  return out;
}

namespace {

using nlohmann::json;

struct JsonReader {
  std::vector<Problem> problems;
  void bad(std::vector<std::string> path, std::string message) { problems.push_back({std::move(path), std::move(message), 400}); }
  bool keys(const json& object, const std::vector<std::string>& known, const std::vector<std::string>& path) {
    bool ok = true;
    for (const auto& [k, v] : object.items())
      if (std::find(known.begin(), known.end(), k) == known.end()) {
        auto p = path;
        p.push_back(k);
        bad(p, "unknown field '" + k + "'" + suggestion(k, known));
        problems.back().at_key = true;
        ok = false;
      }
    return ok;
  }
  template <class T>
  std::optional<T> get(const json& object, const std::string& key, const std::vector<std::string>& path, bool required,
                       const char* what) {
    auto p = path;
    p.push_back(key);
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) {
      if (required) bad(p, "missing field '" + path_text(p) + "' (" + what + ")");
      return std::nullopt;
    }
    bool ok = false;
    if constexpr (std::is_same_v<T, std::string>) ok = it->is_string();
    else if constexpr (std::is_same_v<T, bool>) ok = it->is_boolean();
    else ok = it->is_number_integer();
    if (!ok) {
      bad(p, "'" + path_text(p) + "' must be " + what + ", got " + it->type_name());
      return std::nullopt;
    }
    return it->get<T>();
  }
  std::optional<std::vector<std::string>> strings(const json& object, const std::string& key, const std::vector<std::string>& path) {
    auto p = path;
    p.push_back(key);
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return std::nullopt;
    if (!it->is_array() || !std::all_of(it->begin(), it->end(), [](const json& v) { return v.is_string(); })) {
      bad(p, "'" + path_text(p) + "' must be an array of strings");
      return std::nullopt;
    }
    return it->get<std::vector<std::string>>();
  }
};

const json* arms_array(JsonReader& r, const json& body, bool required) {
  auto it = body.find("arms");
  if (it == body.end()) {
    if (required) r.bad({"arms"}, "missing field 'arms' (an array of {\"name\", \"engine\", \"percent\"})");
    return nullptr;
  }
  if (!it->is_array()) {
    r.bad({"arms"}, "'arms' must be an array of objects");
    return nullptr;
  }
  for (size_t i = 0; i < it->size(); ++i)
    if (!(*it)[i].is_object()) {
      r.bad({"arms", std::to_string(i)}, "'arms[" + std::to_string(i) + "]' must be an object");
      return nullptr;
    }
  return &*it;
}

}  // namespace

std::variant<ExperimentSpec, std::vector<Problem>> spec_from_json(const json& body) {
  JsonReader r;
  if (!body.is_object()) return std::vector<Problem>{{{}, "the experiment must be a JSON object", 400}};
  r.keys(body, {"name", "model", "sticky_key", "arms", "allow_request_choice", "min_samples"}, {});
  ExperimentSpec spec;
  spec.name = r.get<std::string>(body, "name", {}, true, "a string").value_or("");
  spec.model = r.get<std::string>(body, "model", {}, false, "a model's or a group's name").value_or("");
  if (auto key = r.get<std::string>(body, "sticky_key", {}, false, "a string")) {
    auto k = sticky_key_from_name(*key);
    if (!k) r.bad({"sticky_key"}, "unknown sticky_key '" + *key + "'" + suggestion(*key, {"session", "user", "api_key", "none"}));
    else spec.sticky_key = *k;
  }
  spec.allow_request_choice = r.get<bool>(body, "allow_request_choice", {}, false, "a boolean").value_or(false);
  if (auto n = r.get<int64_t>(body, "min_samples", {}, false, "an integer")) {
    if (*n < 2 || *n > 1000000) r.bad({"min_samples"}, "'min_samples' must be 2-1000000, got " + std::to_string(*n));
    else spec.min_samples = uint32_t(*n);
  }
  if (const json* arms = arms_array(r, body, true)) {
    for (size_t i = 0; i < arms->size(); ++i) {
      const json& a = (*arms)[i];
      const std::vector<std::string> at = {"arms", std::to_string(i)};
      r.keys(a, {"name", "engine", router_arm_key(), "config", "percent", "holdback_classes"}, at);
      ArmSpec arm;
      arm.name = r.get<std::string>(a, "name", at, true, "a string").value_or("");
      arm.router = r.get<std::string>(a, router_arm_key(), at, false, "a router plugin's id").value_or("");
      arm.engine = r.get<std::string>(a, "engine", at, arm.router.empty(), "an engine name (or a router plugin's id under the router slot's name)").value_or("");
      if (auto c = a.find("config"); c != a.end() && !c->is_null()) {
        if (arm.router.empty()) r.bad({"arms", std::to_string(i), "config"}, "'config' belongs to a router arm (with 'router')");
        else if (!c->is_object()) r.bad({"arms", std::to_string(i), "config"}, "'config' must be an object (the router plugin's settings)");
        else arm.router_config = *c;
      }
      arm.percent = int(std::clamp<int64_t>(r.get<int64_t>(a, "percent", at, true, "an integer 0-100").value_or(0), -1, 101));
      arm.holdback_classes = r.strings(a, "holdback_classes", at).value_or(std::vector<std::string>{});
      spec.arms.push_back(std::move(arm));
    }
  }
  if (!r.problems.empty()) return r.problems;
  return spec;
}

std::variant<ExperimentSpec, std::vector<Problem>> apply_change(const ExperimentSpec& spec, const json& body) {
  JsonReader r;
  if (!body.is_object()) return std::vector<Problem>{{{}, "the change must be a JSON object", 400}};
  r.keys(body, {"arms"}, {});
  ExperimentSpec out = spec;
  std::vector<std::string> names;
  for (const auto& a : spec.arms) names.push_back(a.name);
  if (const json* arms = arms_array(r, body, true)) {
    if (arms->empty()) r.bad({"arms"}, "'arms' names no arm to change");
    std::set<std::string> seen;
    for (size_t i = 0; i < arms->size(); ++i) {
      const json& a = (*arms)[i];
      const std::vector<std::string> at = {"arms", std::to_string(i)};
      for (const std::string& fixed : {std::string("engine"), router_arm_key(), std::string("config")})
        if (a.contains(fixed))
          r.bad({"arms", std::to_string(i), fixed}, "an arm's " + fixed + " cannot change while the experiment runs; stop it and start another");
      r.keys(a, {"name", "percent", "holdback_classes", "engine", router_arm_key(), "config"}, at);
      auto name = r.get<std::string>(a, "name", at, true, "the name of an arm");
      if (!name) continue;
      auto it = std::find_if(out.arms.begin(), out.arms.end(), [&](const ArmSpec& x) { return x.name == *name; });
      if (it == out.arms.end()) {
        r.bad({"arms", std::to_string(i), "name"}, "experiment '" + spec.name + "' has no arm '" + *name + "'" + suggestion(*name, names));
        continue;
      }
      if (!seen.insert(*name).second) r.bad({"arms", std::to_string(i), "name"}, "arm '" + *name + "' is changed twice");
      if (auto p = r.get<int64_t>(a, "percent", at, false, "an integer 0-100")) it->percent = int(std::clamp<int64_t>(*p, -1, 101));
      if (auto h = r.strings(a, "holdback_classes", at)) it->holdback_classes = *h;
    }
  }
  if (!r.problems.empty()) return r.problems;
  return out;
}

uint64_t assignment_hash(const std::string& experiment, const std::string& key) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64
  auto feed = [&h](unsigned char c) {
    h ^= c;
    h *= 0x100000001b3ULL;
  };
  for (unsigned char c : experiment) feed(c);
  feed(0);
  for (unsigned char c : key) feed(c);
  // FNV-1a's low bits follow the last bytes closely ("user1", "user2", ...): SplitMix64's finalizer
  // spreads every input bit over the whole word before the bucket is taken.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

uint32_t bucket_of(const std::string& experiment, const std::string& key) {
  return uint32_t(assignment_hash(experiment, key) % 100);  // bias of 2^64 mod 100 buckets: < 1e-17
}

Assignment assign(const ExperimentSpec& spec, uint32_t bucket, const std::string& request_class, const std::vector<bool>& down) {
  std::vector<size_t> serving;
  for (size_t i = 0; i < spec.arms.size(); ++i) {
    const auto& h = spec.arms[i].holdback_classes;
    if (request_class.empty() || std::find(h.begin(), h.end(), request_class) == h.end()) serving.push_back(i);
  }
  Assignment out;
  out.held_back = serving.size() < spec.arms.size();
  if (!down.empty()) {
    std::vector<size_t> up;
    for (size_t i : serving)
      if (!down.at(i)) up.push_back(i);
    if (!up.empty()) serving = std::move(up);
  }
  int total = 0;
  for (size_t i : serving) total += spec.arms[i].percent;
  if (total <= 0) return out;  // unreachable for a valid spec
  // The bucket's place in [0, total): the serving arms keep their proportions.
  const int scaled = int(uint64_t(bucket) * uint64_t(total) / 100);
  int upper = 0;
  for (size_t i : serving) {
    upper += spec.arms[i].percent;
    if (scaled < upper) {
      out.arm = i;
      return out;
    }
  }
  out.arm = serving.back();
  return out;
}

}  // namespace tokenhost::experiments
