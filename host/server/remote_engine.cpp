#include "server/remote_engine.hpp"

#include <stdexcept>

namespace tokenhost {

RemoteEngine::RemoteEngine(caf::actor_system& system, EngineDecl decl, EngineFacts facts, std::string node, std::string remote_name,
                           cluster::engine_proxy_actor proxy, cluster::node_actor node_actor)
    : EngineHandle(std::move(decl), std::move(facts)), system_(system), node_(std::move(node)), remote_name_(std::move(remote_name)),
      proxy_(std::move(proxy)), node_actor_(std::move(node_actor)) {
  proxy_->attach_functor([vitals = vitals_](const caf::error&) { vitals->ended(""); });
}

void RemoteEngine::update_prefix(const cluster::EngineInfo& info) {
  if (!info.has_prefix_keys || !facts().prefix_summary) return;
  facts().prefix_summary->assign(info.prefix_keys);
  prefix_version_.store(info.prefix_version, std::memory_order_release);
}

RoutedEngine RemoteEngine::routed() const {
  RoutedEngine r{name(), model(), caf::actor_cast<engine_actor>(proxy_), facts().prefix_summary, vitals_};
  if (facts().capacity > 0) r.capacity = facts().capacity;
  r.node = node_;
  r.rtt_s = facts().link_rtt_s;
  r.role = decl().role;  // as its node announces it
  return r;
}

nlohmann::json RemoteEngine::status() {
  caf::scoped_actor self{system_};
  nlohmann::json out;
  self->request(proxy_, std::chrono::seconds(10), status_atom::value, std::string())
      .receive([&](StatusJson& s) { out = nlohmann::json::parse(s.json); },
               [&](caf::error& e) { out = {{"error", system_.render(e)}}; });
  out["name"] = name();
  out["model"] = model();
  out["node"] = node_;
  if (const auto& summary = facts().prefix_summary) out["prefix_summary_blocks"] = summary->size();
  // Each slot as a local engine's status shows it (its plugin's id), as the worker last reported it.
  for (const auto& [slot, d] : decl().slots) out[slot] = {{"id", d.plugin}};
  return out;
}

SwapResult RemoteEngine::swap(SlotSwap) {
  // The server changes a remote engine's slots by name (change_slot): an instance made here cannot run there.
  return {false, "engine " + name() + " runs on node " + node_ + ": its slots change on that node"};
}

cluster::AdminReply RemoteEngine::change_slot(const cluster::SlotChange& change) {
  caf::scoped_actor self{system_};
  cluster::AdminReply out{false, 504, "node " + node_ + " did not answer"};
  self->request(node_actor_, kRemoteAdminTimeout, cluster::slot_atom::value, cluster::encode(change))
      .receive(
          [&](const std::string& bytes) {
            try {
              out = cluster::decode_admin_reply(bytes);
            } catch (const cluster::WireError& e) {
              out = {false, 502, std::string("its answer does not decode: ") + e.what()};
            }
          },
          [&](caf::error& e) { out = {false, 504, "node " + node_ + " did not answer: " + system_.render(e)}; });
  return out;
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
