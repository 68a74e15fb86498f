// The engines of a deployment, shared by the server's parts: those taking requests, by name, and
// those retired (removed, or replaced by a kvcache swap) that finish the requests they have. The
// admin operations change it; the gateway reads it per request. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/engine_handle.hpp"

namespace tokenhost {

class EngineTable {
 public:
  using Ptr = std::shared_ptr<EngineHandle>;

  Ptr find(const std::string& name) const;
  std::vector<std::string> names() const;  // taking requests, in name order
  std::vector<Ptr> live() const;           // taking requests, in name order
  // Retired ones still finishing their requests; those that have stopped are forgotten first.
  std::vector<Ptr> retiring();
  // An engine named `name` is still draining (a kvcache swap's old engine).
  bool is_retiring(const std::string& name);

  // Adds an engine that takes requests; false when one of its name is there.
  bool add(Ptr engine);
  // Engine `name` takes no more requests: it moves to the retired ones and `successor`, when given,
  // takes its name. Returns the retired engine (NULL when there is none of that name).
  Ptr retire(const std::string& name, Ptr successor);

  // The KV positions of the engines serving `model` (not those down or hung): what admission weighs a
  // request's demand against.
  uint64_t kv_positions_of(const std::string& model) const;
  size_t engines_serving(const std::string& model) const;
  std::string first_model() const;  // the model of the first engine by name; "" when none is left

  // Every engine, live and retiring, taken out of the table (the server stops them).
  std::vector<Ptr> take_all();

 private:
  void prune();  // forget retired engines that have stopped; needs mutex_

  mutable std::mutex mutex_;
  std::map<std::string, Ptr> live_;
  std::vector<Ptr> retired_;
};

}  // namespace tokenhost
