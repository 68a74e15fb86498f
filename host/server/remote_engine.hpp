// An engine on another node, as the head's parts see it: the router sends its requests to a local
// stand-in actor (cluster/engine_proxy.hpp) that relays them over the link. Its facts are what the
// worker announced; its slots change on the worker (change_slot, through the head's admin API); its
// prefix cache is flushed there too (the head refuses it).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "cluster/engine_proxy.hpp"
#include "cluster/wire.hpp"
#include "server/engine_handle.hpp"

namespace tokenhost {

class RemoteEngine final : public EngineHandle {
 public:
  RemoteEngine(caf::actor_system& system, EngineDecl decl, EngineFacts facts, std::string node, std::string remote_name,
               cluster::engine_proxy_actor proxy, cluster::node_actor node_actor);
  RoutedEngine routed() const override;
  nlohmann::json status() override;
  SwapResult swap(SlotSwap swap) override;
  std::pair<KvState, KvState> flush_prefix_cache() override;
  void stop() override;
  bool stopped() const override { return vitals_->stopped(); }
  // "": a remote engine is never rebuilt here; when its node is lost it leaves the table (lost()).
  std::string down_reason() const override { return ""; }
  std::optional<PluginFault> fault() const override { return std::nullopt; }
  uint64_t step_since_ns() const override { return 0; }
  std::string hung() const override { return vitals_->hung(); }
  void abandon(const std::string& why) override;
  // Its node is gone (why): the router drops it, ending what it had in flight in those words.
  void lost(const std::string& why);
  // Asks its node to change a slot of it (blocks up to kRemoteAdminTimeout); a node that does not
  // answer is a refusal (504).
  cluster::AdminReply change_slot(const cluster::SlotChange& change);
  static constexpr std::chrono::seconds kRemoteAdminTimeout{60};

  // Its prefix summary as its node last sent it: replaced when info carries keys (another version
  // than the one held).
  void update_prefix(const cluster::EngineInfo& info);
  uint64_t prefix_version() const { return prefix_version_.load(std::memory_order_acquire); }

  const std::string& node() const { return node_; }
  const std::string& remote_name() const { return remote_name_; }

 private:
  caf::actor_system& system_;
  std::string node_, remote_name_;
  cluster::engine_proxy_actor proxy_;
  cluster::node_actor node_actor_;
  std::atomic<uint64_t> prefix_version_{0};  // of the summary held (0: none received)
  std::shared_ptr<EngineVitals> vitals_ = std::make_shared<EngineVitals>();
};

}  // namespace tokenhost
