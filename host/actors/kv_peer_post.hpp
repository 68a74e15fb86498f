// Messages between KV connectors (th_host_api.peer_send, ABI 1.9), in one process and across the
// nodes of a cluster. Each engine's worker enters itself under the engine's name when it starts and
// leaves when it ends (an engine rebuilt by a swap or a restart enters its new worker under the same
// name); a message goes to the named engine's worker as a byte string (kv_peer_atom: in one process CAF
// moves it, nothing is serialized), which hands it to its kv_connector layers of the sending plugin
// between steps. A name no engine here has, of the form ENGINE@NODE, goes to the routes the cluster
// adds (server_cluster.cpp: a head's links to its workers, a worker's node actor back to its heads),
// which carry it over the cluster's authenticated links; the receiving side delivers it here with the
// sender named ENGINE@NODE as seen from there.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "plugin/host_api.hpp"

namespace tokenhost {

class KvPeerPost : public PeerPost {
 public:
  // Carries a message to engine on node; false when it knows no such node (the next route is asked).
  using Route = std::function<bool(const std::string& node, const std::string& engine, const std::string& from,
                                   const std::string& plugin, std::string& bytes)>;

  void enter(const std::string& engine, worker_actor worker);
  // Leaves only when worker is still the one entered under engine (a rebuilt engine's new worker may
  // have entered before the old one ended).
  void leave(const std::string& engine, const caf::actor_addr& worker);
  void add_route(Route route);

  // peer_send: to an engine of this process, else through a route.
  th_status send(const std::string& from_engine, const std::string& plugin, const std::string& to, std::string bytes,
                 std::string& why) override;
  // To an engine of this process only (a message that came over a route). TH_ERR_NOT_FOUND: none runs.
  th_status deliver(const std::string& from, const std::string& plugin, const std::string& to, std::string bytes, std::string& why);

 private:
  // To the worker of engine `to`, bytes moved into the message; false (bytes untouched) when none runs.
  bool post_local(const std::string& from, const std::string& plugin, const std::string& to, std::string& bytes);
  std::mutex mutex_;
  std::map<std::string, worker_actor> workers_;
  std::vector<Route> routes_;
};

}  // namespace tokenhost
