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
