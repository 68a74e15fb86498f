#include "routing/overload.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "metrics/metrics.hpp"
#include "routing/policy_settings.hpp"

namespace tokenhost::routing {

nlohmann::json OverloadPolicy::json() const {
  nlohmann::json cls = nlohmann::json::array();
  for (size_t i = 0; i < classes.size(); ++i) {
    nlohmann::json c = {{"name", classes[i].name}};
    if (i + 1 < classes.size()) c["shed_at"] = classes[i].shed_at;
    cls.push_back(c);
  }
  return {{"enabled", enabled},        {"action", action},
          {"classes", cls},            {"default_class", default_class},
          {"retry_after_s", retry_after_s}, {"engine_sequences", engine_sequences}};
}

size_t OverloadPolicy::class_of(const std::string& request_class) const {
  for (size_t i = 0; i < classes.size(); ++i)
    if (classes[i].name == request_class) return i;
  for (size_t i = 0; i < classes.size(); ++i)
    if (classes[i].name == default_class) return i;
  return classes.empty() ? 0 : classes.size() - 1;
}

OverloadPolicy changed_overload_policy(OverloadPolicy p, const nlohmann::json& change, const std::string& where) {
  const PolicySettings settings(change, "overload", where,
                                {"enabled", "action", "classes", "default_class", "retry_after_s", "engine_sequences"});
  auto bad = [&](const std::string& what) { return std::invalid_argument(where + ": overload." + what); };
  settings.read("enabled", p.enabled);
  settings.read("retry_after_s", 1, 3600, p.retry_after_s);
  settings.read("engine_sequences", 0, 65536, p.engine_sequences, "0: each engine's max_step_seqs");
  if (auto it = change.find("action"); it != change.end()) {
    if (!it->is_string() || (*it != "shed" && *it != "cheaper")) throw bad("action must be \"shed\" or \"cheaper\", not " + it->dump());
    p.action = it->get<std::string>();
  }
  if (auto it = change.find("classes"); it != change.end()) {
    if (!it->is_array() || it->size() < 2 || it->size() > 16)
      throw bad("classes must be a list of 2..16 classes, lowest first, each {name, shed_at} (the last without shed_at), not " + it->dump());
    std::vector<OverloadClass> classes;
    std::set<std::string> names;
    double below = 0;
    for (size_t i = 0; i < it->size(); ++i) {
      const auto& c = (*it)[i];
      const std::string at = "classes[" + std::to_string(i) + "]";
      if (!c.is_object()) throw bad(at + " must be {name, shed_at}, not " + c.dump());
      for (const auto& [key, value] : c.items())
        if (key != "name" && key != "shed_at") throw bad(at + " has no setting '" + key + "' (name, shed_at)");
      auto name = c.find("name");
      if (name == c.end() || !name->is_string() || name->get<std::string>().empty() || name->get<std::string>().size() > 64)
        throw bad(at + ".name must be a string of 1..64 characters");
      if (!names.insert(name->get<std::string>()).second) throw bad(at + ".name '" + name->get<std::string>() + "' is listed twice");
      OverloadClass cls{name->get<std::string>(), 0};
      auto shed = c.find("shed_at");
      const bool last = i + 1 == it->size();
      if (last) {
        if (shed != c.end()) throw bad(at + " is the highest class, which is never shed: it takes no shed_at");
      } else {
        if (shed == c.end() || !shed->is_number() || shed->get<double>() < 0.05 || shed->get<double>() > 100)
          throw bad(at + ".shed_at must be a number in 0.05..100 (a fraction of an engine's capacity)");
        cls.shed_at = shed->get<double>();
        if (cls.shed_at < below)
          throw bad(at + ".shed_at " + std::to_string(cls.shed_at) + " is below the lower class's " + std::to_string(below) +
                    ": a higher class is shed later, not sooner");
        below = cls.shed_at;
      }
      classes.push_back(std::move(cls));
    }
    p.classes = std::move(classes);
    if (change.find("default_class") == change.end() && !names.count(p.default_class)) p.default_class = p.classes.front().name;
  }
  if (auto it = change.find("default_class"); it != change.end()) {
    if (!it->is_string()) throw bad("default_class must be a class's name, not " + it->dump());
    p.default_class = it->get<std::string>();
  }
  if (p.enabled) {
    if (p.classes.size() < 2) throw bad("classes must list at least two classes when overload is enabled (the lowest is shed first)");
    if (std::none_of(p.classes.begin(), p.classes.end(), [&](const OverloadClass& c) { return c.name == p.default_class; }))
      throw bad("default_class '" + p.default_class + "' is not one of the classes");
  }
  return p;
}

OverloadGuard::OverloadGuard(OverloadPolicy policy, metrics::Registry* metrics)
    : policy_(std::make_shared<const OverloadPolicy>(std::move(policy))) {
  if (metrics == nullptr) return;
  shed_family_ = &metrics->family(metrics::Type::counter, "tokenhost_overload_shed_total",
                                  "Requests refused (503) because every engine of their model was full for their class, by public model "
                                  "and class",
                                  {"model", "class"});
  degraded_family_ = &metrics->family(metrics::Type::counter, "tokenhost_overload_degraded_total",
                                      "Requests sent to a cheaper member of their group because the models they could go to were full "
                                      "for their class, by public model, class and the model that took them",
                                      {"model", "class", "to"});
}

std::shared_ptr<const OverloadPolicy> OverloadGuard::policy() const {
  std::lock_guard lock(mutex_);
  return policy_;
}

void OverloadGuard::set_policy(OverloadPolicy policy) {
  auto p = std::make_shared<const OverloadPolicy>(std::move(policy));
  std::lock_guard lock(mutex_);
  policy_ = std::move(p);
}

void OverloadGuard::shed(const std::string& model, const std::string& cls) {
  {
    std::lock_guard lock(mutex_);
    ++shed_[{model, cls}];
  }
  if (shed_family_) shed_family_->add({model, cls}, 1);
}

void OverloadGuard::degraded(const std::string& model, const std::string& cls, const std::string& to) {
  {
    std::lock_guard lock(mutex_);
    ++degraded_[{model, cls}];
  }
  if (degraded_family_) degraded_family_->add({model, cls, to}, 1);
}

nlohmann::json OverloadGuard::json() const {
  std::lock_guard lock(mutex_);
  nlohmann::json j = {{"policy", policy_->json()}, {"shed", nlohmann::json::array()}, {"degraded", nlohmann::json::array()}};
  for (const auto& [key, n] : shed_) j["shed"].push_back({{"model", key.first}, {"class", key.second}, {"requests", n}});
  for (const auto& [key, n] : degraded_) j["degraded"].push_back({{"model", key.first}, {"class", key.second}, {"requests", n}});
  return j;
}

}  // namespace tokenhost::routing
