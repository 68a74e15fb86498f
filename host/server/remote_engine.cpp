#include "server/remote_engine.hpp"

#include <stdexcept>

namespace tokenhost {

RemoteEngine::RemoteEngine(caf::actor_system& system, EngineDecl decl, EngineFacts facts, std::string node, std::string remote_name,
                           cluster::engine_proxy_actor proxy)
    : EngineHandle(std::move(decl), std::move(facts)), system_(system), node_(std::move(node)), remote_name_(std::move(remote_name)),
      proxy_(std::move(proxy)) {
  proxy_->attach_functor([vitals = vitals_](const caf::error&) { vitals->ended(""); });
}

RoutedEngine RemoteEngine::routed() const {
  return RoutedEngine{name(), model(), caf::actor_cast<engine_actor>(proxy_), facts().prefix_summary, vitals_};
}

nlohmann::json RemoteEngine::status() {
  caf::scoped_actor self{system_};
  nlohmann::json out;
  self->request(proxy_, std::chrono::seconds(10), status_atom::value, std::string())
      .receive([&](StatusJson& s) { out = nlohmann::json::parse(s.json); },
               [&](caf::error& e) { out = {{"error", system_.render(e)}}; });
  out["name"] = name();
  out["model"] = model();
  nlohmann::json plugins = nlohmann::json::object();
  for (const auto& [slot, d] : decl().slots) plugins[slot] = d.plugin;
  out["plugins"] = std::move(plugins);
  return out;
}

SwapResult RemoteEngine::swap(SlotSwap) {
  return {false, "engine " + name() + " runs on node " + node_ + ": change its slots on that node's admin API"};
}

std::pair<KvState, KvState> RemoteEngine::flush_prefix_cache() {
  throw std::runtime_error("engine " + name() + " runs on node " + node_ + ": flush its prefix cache on that node's admin API");
}

void RemoteEngine::stop() { caf::anon_send_exit(proxy_, caf::exit_reason::user_shutdown); }

void RemoteEngine::abandon(const std::string& why) { lost(why); }

void RemoteEngine::lost(const std::string& why) {
  vitals_->note_hung(why);
  caf::anon_send(proxy_, cluster::lost_atom::value, why);
}

}  // namespace tokenhost
