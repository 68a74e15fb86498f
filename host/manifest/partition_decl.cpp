#include "manifest/partition_decl.hpp"

#include <algorithm>
#include <set>
#include <thread>

#include "util/text.hpp"

namespace tokenhost {
namespace {

PartitionDecl read_partition(const TomlReader& r, const std::string& name, const toml::node& node) {
  const std::string ctx = "[partitions." + name + "]";
  if (!node.is_table()) r.fail(node, ctx + " must be a table");
  const toml::table& t = *node.as_table();
  r.check_keys(t, {"threads", "cores"}, ctx);
  PartitionDecl p;
  p.name = name;
  const int machine = int(std::max(1u, std::thread::hardware_concurrency()));
  if (const toml::node* cores = t.get("cores")) {
    const toml::array* a = cores->as_array();
    if (a == nullptr || a->empty()) r.fail(*cores, "cores in " + ctx + " must be a non-empty array of core numbers");
    std::set<int64_t> seen;
    for (const toml::node& c : *a) {
      const auto* v = c.as_integer();
      if (v == nullptr) r.fail(c, "cores in " + ctx + " must hold integers, not " + toml_type_name(c));
      if (v->get() < 0 || v->get() >= machine)
        r.fail(c, "core " + std::to_string(v->get()) + " in " + ctx + " is not one of this machine's (0 to " + std::to_string(machine - 1) + ")");
      if (!seen.insert(v->get()).second) r.fail(c, "core " + std::to_string(v->get()) + " is listed twice in " + ctx);
      p.cores.push_back(int(v->get()));
    }
  }
  const auto threads = r.optional_int(t, "threads", ctx, 1, kMaxPartitionThreads);
  if (!threads && p.cores.empty()) r.fail(t, ctx + " needs threads (how many compute threads) or cores (which cores)");
  p.threads = threads ? uint32_t(*threads) : uint32_t(p.cores.size());
  return p;
}

}  // namespace

std::map<std::string, PartitionDecl> read_partitions(const TomlReader& r, const toml::table& partitions) {
  std::map<std::string, PartitionDecl> out;
  for (const auto& [key, node] : partitions) {
    const std::string name(key.str());
    out.emplace(name, read_partition(r, name, node));
  }
  return out;
}

ExpertParallelDecl read_expert_parallel(const TomlReader& r, const toml::table& t, const std::string& ctx,
                                        const std::map<std::string, PartitionDecl>& partitions, uint32_t n_experts) {
  ExpertParallelDecl x;
  const toml::node* list = t.get("expert_partitions");
  if (list == nullptr) {
    for (const char* key : {"expert_replicas", "rebalance_steps"})
      if (const toml::node* n = t.get(key)) r.fail(*n, std::string(key) + " in " + ctx + " applies to expert_partitions: set it too");
    return x;
  }
  const toml::array* a = list->as_array();
  if (a == nullptr || a->size() < 2) r.fail(*list, "expert_partitions in " + ctx + " must list two [partitions] names at least");
  std::vector<std::string> names;
  for (const auto& [n, p] : partitions) names.push_back(n);
  for (const toml::node& n : *a) {
    const auto* name = n.as_string();
    if (name == nullptr) r.fail(n, "expert_partitions in " + ctx + " must hold partition names, not " + toml_type_name(n));
    if (!partitions.count(name->get()))
      r.fail(n, "expert_partitions in " + ctx + " names unknown partition '" + name->get() + "'" +
                    (names.empty() ? std::string(" (the manifest declares no [partitions])") : suggestion(name->get(), names)));
    if (std::find(x.partitions.begin(), x.partitions.end(), name->get()) != x.partitions.end())
      r.fail(n, "partition '" + name->get() + "' is listed twice in expert_partitions of " + ctx);
    x.partitions.push_back(name->get());
  }
  if (n_experts == 0) r.fail(*list, "expert_partitions in " + ctx + ": the engine's model is dense (no experts to spread)");
  if (n_experts < x.partitions.size())
    r.fail(*list, "expert_partitions in " + ctx + ": " + std::to_string(x.partitions.size()) + " partitions for the model's " +
                      std::to_string(n_experts) + " experts (one expert per partition at least)");
  x.replicas = uint32_t(r.optional_int(t, "expert_replicas", ctx, 0, 1 << 16).value_or(0));
  x.rebalance_steps = uint32_t(r.optional_int(t, "rebalance_steps", ctx, 0, 1 << 30).value_or(x.rebalance_steps));
  return x;
}

std::string describe(const PartitionDecl& p) {
  std::string s = p.name + ": " + std::to_string(p.threads) + (p.threads == 1 ? " thread" : " threads");
  if (!p.cores.empty()) {
    std::vector<std::string> cores;
    for (int c : p.cores) cores.push_back(std::to_string(c));
    s += " on cores " + join(cores, ",");
  }
  return s;
}

}  // namespace tokenhost
