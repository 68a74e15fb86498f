#include "actors/kv_peer_post.hpp"

namespace tokenhost {

void KvPeerPost::enter(const std::string& engine, worker_actor worker) {
  std::lock_guard lock(mutex_);
  workers_[engine] = std::move(worker);
}

void KvPeerPost::leave(const std::string& engine, const caf::actor_addr& worker) {
  std::lock_guard lock(mutex_);
  if (auto it = workers_.find(engine); it != workers_.end() && it->second.address() == worker) workers_.erase(it);
}

void KvPeerPost::add_route(Route route) {
  std::lock_guard lock(mutex_);
  routes_.push_back(std::move(route));
}

bool KvPeerPost::post_local(const std::string& from, const std::string& plugin, const std::string& to, std::string& bytes) {
  worker_actor worker;
  {
    std::lock_guard lock(mutex_);
    if (auto it = workers_.find(to); it != workers_.end()) worker = it->second;
  }
  if (!worker) return false;
  caf::anon_send(worker, kv_peer_atom::value, from, plugin, std::move(bytes));
  return true;
}

th_status KvPeerPost::deliver(const std::string& from, const std::string& plugin, const std::string& to, std::string bytes,
                              std::string& why) {
  if (post_local(from, plugin, to, bytes)) return TH_OK;
  why = "no engine '" + to + "' runs here";
  return TH_ERR_NOT_FOUND;
}

th_status KvPeerPost::send(const std::string& from_engine, const std::string& plugin, const std::string& to, std::string bytes,
                           std::string& why) {
  if (post_local(from_engine, plugin, to, bytes)) return TH_OK;
  const size_t at = to.rfind('@');
  if (at != std::string::npos && at > 0 && at + 1 < to.size()) {
    std::vector<Route> routes;
    {
      std::lock_guard lock(mutex_);
      routes = routes_;
    }
    for (const Route& route : routes)
      if (route(to.substr(at + 1), to.substr(0, at), from_engine, plugin, bytes)) return TH_OK;
    why = "no engine '" + to + "' runs in this process, and no linked node is named '" + to.substr(at + 1) + "'";
    return TH_ERR_NOT_FOUND;
  }
  why = "no engine '" + to + "' runs in this process";
  return TH_ERR_NOT_FOUND;
}

}  // namespace tokenhost
