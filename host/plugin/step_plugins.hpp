// The plugins one step runs through, the time spent in each, and how a step's plugin call fails: what
// a backend's run_step is given (base/step.hpp holds the step itself).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "plugin/instance.hpp"
#include "plugin/kind.hpp"

namespace tokenhost {

class ExpertLoad;        // base/expert_load.hpp
class ExpertPartitions;  // plugin/expert_partitions.hpp

// Seconds one step spent inside each slot's plugin calls (for the per-plugin time metrics).
struct PluginSeconds {
  std::vector<double> by_slot = std::vector<double>(all_slots().size(), 0.0);
  double& operator[](SlotId slot) { return by_slot.at(slot.index()); }
  double operator[](SlotId slot) const { return by_slot.at(slot.index()); }
};

// The plugins one step runs through (the worker's attention, kvcache and, for MoE models, moe slots).
struct StepPlugins {
  const SlotInstances* instances = nullptr;
  PluginSeconds* seconds = nullptr;  // when set, time in each plugin is added to it
  ExpertLoad* expert_load = nullptr;  // when set, an MoE model's gate() choices are counted there
  // When set (an engine with expert partitions), an MoE layer's experts() run over its partitions.
  ExpertPartitions* expert_partitions = nullptr;
  // The instance of slot, NULL when it is empty.
  PluginInstance* get(SlotId slot) const { return instances != nullptr ? instances->get(slot) : nullptr; }
  // Where the time in slot's calls adds up; NULL when not counted.
  double* seconds_of(SlotId slot) const { return seconds != nullptr ? &(*seconds)[slot] : nullptr; }
};

// A TH_ERR_RESOURCE_EXHAUSTED from the kvcache plugin: the scheduler over-committed the cache.
struct KvExhausted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A plugin call of a step failed with status s: throws KvExhausted for TH_ERR_RESOURCE_EXHAUSTED (the
// engine preempts and goes on), else std::runtime_error (the step's requests fail), naming the
// plugin, the call and the plugin's message.
[[noreturn]] inline void throw_plugin_failure(const PluginInstance& p, const char* call, th_status s, const th_error& err) {
  std::string message = p.id() + " " + call + " failed with " + status_name(s) + ": " + err.text();
  if (s == TH_ERR_RESOURCE_EXHAUSTED) throw KvExhausted(message);
  throw std::runtime_error(message);
}

}  // namespace tokenhost
