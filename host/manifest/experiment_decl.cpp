#include "manifest/experiment_decl.hpp"

#include "manifest/deployment.hpp"

namespace tokenhost {
namespace {

nlohmann::json to_json(const toml::node& node) {
  if (auto* t = node.as_table()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : *t) out[std::string(k.str())] = to_json(v);
    return out;
  }
  if (auto* a = node.as_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : *a) out.push_back(to_json(v));
    return out;
  }
  if (auto v = node.value_exact<std::string>()) return *v;
  if (auto v = node.value_exact<int64_t>()) return *v;
  if (auto v = node.value_exact<bool>()) return *v;
  if (auto v = node.value_exact<double>()) return *v;
  return "<" + toml_type_name(node) + ">";  // refused by the JSON reader as the wrong type
}

// Where a problem's path leads from the experiment's table: the value there, or its key for a problem
// about the key, or the deepest node that exists.
toml::source_position locate(const toml::table& experiment, const experiments::Problem& problem) {
  const toml::node* at = &experiment;
  toml::source_position key_at = experiment.source().begin;
  for (const auto& step : problem.path) {
    const toml::node* next = nullptr;
    if (auto* t = at->as_table()) {
      if (auto it = t->find(step); it != t->end()) {
        next = &it->second;
        key_at = it->first.source().begin.line ? it->first.source().begin : next->source().begin;
      }
    } else if (auto* a = at->as_array(); a && !step.empty() && std::isdigit(static_cast<unsigned char>(step[0]))) {
      next = a->get(size_t(std::stoul(step)));
      if (next) key_at = next->source().begin;
    }
    if (next == nullptr) break;
    at = next;
  }
  return problem.at_key ? key_at : at->source().begin;
}

}  // namespace

std::vector<experiments::ExperimentSpec> read_experiments(const TomlReader& r, const toml::table& table,
                                                          const std::map<std::string, EngineDecl>& engines) {
  std::vector<experiments::EngineView> views;
  for (const auto& [name, e] : engines) views.push_back({name, e.model, ""});
  std::vector<experiments::ExperimentSpec> out;
  for (const auto& [key, node] : table) {
    const std::string name(key.str());
    const std::string ctx = "[experiments." + name + "]";
    if (!node.is_table()) r.fail(node, ctx + " must be a table");
    const toml::table& t = *node.as_table();
    nlohmann::json body = to_json(t);
    if (body.contains("name")) r.fail(*t.get("name"), ctx + ": the experiment's name is its table's name; remove 'name'");
    body["name"] = name;
    auto fail = [&](const experiments::Problem& p) {
      std::string where = experiments::path_text(p.path);
      auto at = locate(t, p);
      throw ManifestError(r.file(), at.line ? at.line : 1, at.column ? at.column : 1, ctx + (where.empty() ? "" : " " + where) + ": " + p.message);
    };
    auto parsed = experiments::spec_from_json(body);
    if (auto* problems = std::get_if<std::vector<experiments::Problem>>(&parsed)) fail(problems->front());
    auto spec = std::get<experiments::ExperimentSpec>(parsed);
    // Experiments declared before this one run too: one per model, an engine in one of them.
    std::vector<std::string> on_model;
    auto model_of = [&](const experiments::ExperimentSpec& x) {
      if (!x.model.empty() || x.arms.empty()) return x.model;  // router arms name it
      auto e = engines.find(x.arms.front().engine);
      return e == engines.end() ? std::string() : e->second.model;
    };
    const std::string model = model_of(spec);
    for (const auto& other : out)
      if (model_of(other) == model) on_model.push_back(other.name);
    auto problems = experiments::validate(spec, views, on_model);
    if (!problems.empty()) fail(problems.front());
    for (auto& v : views)
      for (const auto& a : spec.arms)
        if (v.name == a.engine) v.experiment = spec.name;
    out.push_back(std::move(spec));
  }
  return out;
}

}  // namespace tokenhost
