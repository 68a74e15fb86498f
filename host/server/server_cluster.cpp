// Server's part in a cluster ([cluster]): the worker's node actor on its cluster port, the head's links
// to its workers, and the remote engines those links bring into the engine table and the router.
#include <algorithm>
#include <sstream>

#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include "cluster/transport.hpp"
#include "server/remote_engine.hpp"
#include "server/server.hpp"

namespace tokenhost {

std::vector<cluster::EngineInfo> Server::local_engine_infos(const cluster::PrefixVersions& held) const {
  std::vector<cluster::EngineInfo> out;
  for (const auto& e : engines_->live()) {
    if (dynamic_cast<const LocalEngine*>(e.get()) == nullptr) continue;  // a head's remote engines stay its own
    cluster::EngineInfo info;
    info.name = e->name();
    info.model = e->model();
    info.device = e->device();
    info.kv_positions = e->facts().kv_positions;
    info.prefix_cache = e->facts().prefix_cache;
    info.window_cap = e->facts().window_cap;
    info.capacity = e->decl().max_step_seqs;
    info.role = engine_role_name(e->decl().role);
    for (const auto& [slot, d] : e->decl().slots) info.plugins[slot] = d.plugin;
    info.serving = e->serving();
    info.down_reason = e->serving() ? "" : e->stop_reason();
    if (const auto& summary = e->facts().prefix_summary) {
      info.prefix_block = summary->block_size();
      info.prefix_version = summary->version();
      auto h = held.versions.find(info.name);
      if (h == held.versions.end() || h->second != info.prefix_version) {
        info.has_prefix_keys = true;
        info.prefix_keys = summary->keys();
      }
    }
    out.push_back(std::move(info));
  }
  return out;
}

// A head's sequence for an engine here, through this node's own admission as its gateway's requests go
// (the client as the head saw it: an API key is the same client whichever head it came through).
cluster::NodeInit::Admitted Server::admit_for_head(const std::string& engine, const GenerateRequest& r) {
  AdmissionAsk ask;
  ask.client = r.client;
  auto e = engines_->find(engine);
  ask.model = e ? e->model() : r.model;
  ask.sequences = 1;
  ask.tokens = r.prompt.size() + r.max_tokens;
  auto admitted = gateway_->admit(ask);
  if (auto* refused = std::get_if<AdmissionRefusal>(&admitted))
    return {nullptr, uint32_t(refused->http_status), uint32_t(refused->retry_after_s), refused->message};
  return {std::get<std::shared_ptr<AdmissionTicket>>(admitted), 0, 0, ""};
}

// A head's change of a slot of an engine here: what this node's admin API would do with it, on a
// local engine only (a head does not reach through this node to another).
cluster::AdminReply Server::change_slot_for_head(const cluster::SlotChange& c) {
  try {
    auto target = engines_->find(c.engine);
    if (!target || dynamic_cast<LocalEngine*>(target.get()) == nullptr) throw AdminError(404, "no engine '" + c.engine + "' on node " + deployment_.cluster.node);
    if (c.plugin.empty()) return {true, 200, unload_slot(c.engine, c.slot)};
    toml::table config;
    try {
      config = toml::parse(std::string_view(c.config_toml), std::string_view("slot change"));
    } catch (const toml::parse_error& e) {
      throw AdminError(400, std::string("the plugin's config does not parse: ") + std::string(e.description()));
    }
    return {true, 200, set_slot(c.engine, c.slot, c.plugin, config)};
  } catch (const AdminError& e) {
    return {false, uint32_t(std::clamp(e.http_status, 400, 599)), e.what()};
  } catch (const std::exception& e) {
    return {false, 500, e.what()};
  }
}

// A slot change of a remote engine: made by its node (change_slot_for_head there), which answers
// what changed or why nothing did. The head's view of the engine's plugins follows.
std::string Server::change_remote_slot(RemoteEngine& engine, const std::string& slot, const std::string& plugin, const toml::table* config) {
  cluster::SlotChange c{engine.remote_name(), slot, plugin, ""};
  if (config != nullptr) {
    std::ostringstream text;
    text << *config;
    c.config_toml = text.str();
  }
  cluster::AdminReply r = engine.change_slot(c);
  if (!r.ok) throw AdminError(int(r.status), "node " + engine.node() + ": " + r.message);
  SlotDecl d;
  d.plugin = plugin;
  engine.set_slot_decl(slot, plugin.empty() ? nullptr : &d);
  spdlog::info("admin: engine {}: {}", engine.name(), r.message);
  return r.message;
}

void Server::start_cluster() {
  const ClusterDecl& c = deployment_.cluster;
  cluster::check_transport(*system_, c);
  // KV connectors' messages (th_host_api.peer_send) between engines of different nodes: to ENGINE@NODE
  // over the head's link to that worker, or from a worker over its node actor back to a head; what
  // arrives goes to the engine it names here.
  const std::shared_ptr<KvPeerPost> post = factory_->peer_post();
  auto kv_arrived = [post](const std::string& from, const std::string& plugin, const std::string& to, std::string bytes) {
    std::string why;
    if (post->deliver(from, plugin, to, std::move(bytes), why) != TH_OK)
      spdlog::warn("cluster: a KV message from {} for {} dropped: {}", from, to, why);
  };
  if (c.listens()) {
    cluster::NodeInit n;
    n.name = c.node;
    n.identity = identity_;
    n.find_engine = [engines = engines_](const std::string& name) -> std::optional<engine_actor> {
      auto e = engines->find(name);
      if (!e || !e->serving() || dynamic_cast<LocalEngine*>(e.get()) == nullptr) return std::nullopt;
      return e->routed().actor;
    };
    n.engines = [this](const cluster::PrefixVersions& held) { return local_engine_infos(held); };
    n.change_slot = [this](const cluster::SlotChange& c) { return change_slot_for_head(c); };
    n.admit = [this](const std::string& engine, const GenerateRequest& r) { return admit_for_head(engine, r); };
    n.kv_arrived = kv_arrived;
    node_actor_ = cluster::spawn_node_actor(*system_, std::move(n));
    cluster::publish_node(*system_, c, node_actor_);
  }
  for (const auto& w : c.workers) {
    cluster::LinkInit l;
    l.node = w.name;
    l.host = w.host;
    l.port = w.port;
    l.self_name = c.node;
    l.identity = identity_;
    l.heartbeat = std::chrono::milliseconds(c.heartbeat_ms);
    l.heartbeat_timeout = std::chrono::milliseconds(c.heartbeat_timeout_ms);
    l.connect_timeout = std::chrono::milliseconds(c.connect_timeout_ms);
    l.health = std::make_shared<cluster::LinkHealth>();
    l.joined = [this](const std::string& node, const cluster::node_actor& actor, const std::vector<cluster::EngineInfo>& engines) {
      remote_joined(node, actor, engines);
    };
    l.engines_changed = [this](const std::string& node, const std::vector<cluster::EngineInfo>& engines) {
      sync_remote_engines(node, engines);
    };
    l.left = [this](const std::string& node, const std::string& why) { remote_left(node, why); };
    l.held_prefixes = [this](const std::string& node) { return held_prefixes(node); };
    l.kv_arrived = kv_arrived;
    auto health = l.health;
    links_.push_back({w.name, cluster::spawn_link(*system_, std::move(l)), health});
  }
  // links_ is complete: the route reads it from the engines' threads from now on.
  post->add_route([this](const std::string& node, const std::string& engine, const std::string& from, const std::string& plugin,
                         std::string& bytes) {
    for (const auto& link : links_)
      if (link.name == node) {
        caf::anon_send(link.actor, cluster::kv_send_atom::value, from, plugin, engine, std::move(bytes));
        return true;
      }
    return false;
  });
  if (node_actor_)  // after the links: a name neither a worker of this head nor an engine here is a head's
    post->add_route([node = node_actor_](const std::string& head, const std::string& engine, const std::string& from,
                                         const std::string& plugin, std::string& bytes) {
      caf::anon_send(node, cluster::kv_send_atom::value, head, from, plugin, engine, std::move(bytes));
      return true;  // a head of that name may not be joined: the node actor logs the drop
    });
}

cluster::PrefixVersions Server::held_prefixes(const std::string& node) const {
  cluster::PrefixVersions out;
  for (const auto& e : engines_->live())
    if (auto* r = dynamic_cast<const RemoteEngine*>(e.get()); r != nullptr && r->node() == node && e->facts().prefix_summary)
      out.versions[r->remote_name()] = r->prefix_version();
  return out;
}

// On the link's actor thread: nothing here blocks (the router is told, not asked).
void Server::remote_joined(const std::string& node, const cluster::node_actor& actor, const std::vector<cluster::EngineInfo>& engines) {
  // An earlier link's engines, not yet gone, make way for this link's.
  drop_remote_engines_of(node, "worker " + node + " joined again");
  {
    std::lock_guard lock(remote_mutex_);
    remote_nodes_[node] = actor;
  }
  sync_remote_engines(node, engines);
}

void Server::drop_remote_engine(const std::shared_ptr<EngineHandle>& e, const std::string& why) {
  // Out of the router first: the sequences the engine hands back are routed to the others.
  caf::anon_send(router_, engine_remove_atom::value, e->name());
  if (auto* r = dynamic_cast<RemoteEngine*>(e.get())) r->lost(why);
  engines_->retire(e->name(), nullptr);
}

void Server::sync_remote_engines(const std::string& node, const std::vector<cluster::EngineInfo>& engines) {
  cluster::node_actor actor;
  {
    std::lock_guard lock(remote_mutex_);
    auto& kept = remote_engines_[node] = engines;  // for status: without the summaries' keys
    for (auto& info : kept) info.prefix_keys = {};
    auto it = remote_nodes_.find(node);
    if (it == remote_nodes_.end()) return;  // the link went down meanwhile
    actor = it->second;
  }
  std::set<std::string> listed;
  for (const auto& info : engines) {
    const std::string name = info.name + "@" + node;
    listed.insert(info.name);
    auto existing = engines_->find(name);
    if (!info.serving) {
      if (existing) {
        spdlog::warn("cluster: engine {} is down on its node ({}): no longer routed", name, info.down_reason);
        drop_remote_engine(existing, "engine " + name + " went down on its node: " + info.down_reason);
      }
      continue;
    }
    if (existing) {
      if (auto* r = dynamic_cast<RemoteEngine*>(existing.get())) r->update_prefix(info);
      continue;
    }
    if (!deployment_.models.count(info.model)) {
      bool first;
      {
        std::lock_guard lock(remote_mutex_);  // links of several workers sync at once
        first = remote_unroutable_.insert(name).second;
      }
      if (first)
        spdlog::error("cluster: engine {} serves model '{}', which this head's manifest does not declare: not routed", name, info.model);
      continue;
    }
    EngineDecl decl;
    decl.name = name;
    decl.model = info.model;
    decl.device = info.device;
    decl.role = engine_role_named(info.role).value_or(TH_ROLE_BOTH);  // the wire admits the three names only
    for (const auto& [slot, plugin] : info.plugins) decl.slots[slot].plugin = plugin;
    EngineFacts facts;
    facts.kv_positions = info.kv_positions;
    facts.prefix_cache = info.prefix_cache;
    facts.window_cap = info.window_cap;
    facts.capacity = info.capacity;
    if (info.prefix_cache && info.prefix_block > 0)
      facts.prefix_summary = std::make_shared<PrefixSummary>(info.prefix_block, size_t(info.kv_positions / info.prefix_block));
    for (const auto& link : links_)
      if (link.name == node) facts.link_rtt_s = cluster::LinkHealth::rtt_seconds(link.health);
    auto proxy = cluster::spawn_engine_proxy(*system_, {name, info.name, node, actor});
    auto e = std::make_shared<RemoteEngine>(*system_, std::move(decl), std::move(facts), node, info.name, proxy, actor);
    e->update_prefix(info);
    RoutedEngine routed = e->routed();
    engines_->add(e);
    caf::anon_send(router_, engine_add_atom::value, std::move(routed));
    spdlog::info("cluster: engine {} ({}) takes requests", name, info.model);
  }
  for (const auto& e : engines_->live())
    if (auto* r = dynamic_cast<RemoteEngine*>(e.get()); r != nullptr && r->node() == node && !listed.count(r->remote_name())) {
      spdlog::warn("cluster: engine {} is gone from its node: no longer routed", e->name());
      drop_remote_engine(e, "engine " + e->name() + " was removed on its node");
    }
}

size_t Server::drop_remote_engines_of(const std::string& node, const std::string& why) {
  size_t n = 0;
  for (const auto& e : engines_->live())
    if (auto* r = dynamic_cast<RemoteEngine*>(e.get()); r != nullptr && r->node() == node) {
      drop_remote_engine(e, why);
      ++n;
    }
  return n;
}

void Server::stop_cluster() {
  // links_ is not cleared: admin status reads it, and it never changes after start-up.
  for (auto& l : links_) caf::anon_send_exit(l.actor, caf::exit_reason::user_shutdown);
  if (node_actor_) caf::anon_send_exit(node_actor_, caf::exit_reason::user_shutdown);
  node_actor_ = nullptr;
}

void Server::remote_left(const std::string& node, const std::string& why) {
  const size_t n = drop_remote_engines_of(node, "worker " + node + " lost: " + why);
  std::lock_guard lock(remote_mutex_);
  remote_engines_.erase(node);
  remote_nodes_.erase(node);
  spdlog::warn("cluster: {} engine(s) of worker {} no longer take requests", n, node);
}

nlohmann::json Server::cluster_status() const {
  const ClusterDecl& c = deployment_.cluster;
  if (!c.enabled) return nullptr;
  nlohmann::json j{{"node", c.node}, {"tls", c.tls}};
  if (c.listens()) j["listen"] = c.listen_host + ":" + std::to_string(c.listen_port);
  nlohmann::json workers = nlohmann::json::array();
  std::lock_guard lock(remote_mutex_);
  for (const auto& l : links_) {
    nlohmann::json w = l.health->json();
    w["name"] = l.name;
    nlohmann::json engines = nlohmann::json::array();
    if (auto it = remote_engines_.find(l.name); it != remote_engines_.end())
      for (const auto& e : it->second)
        engines.push_back({{"name", e.name}, {"model", e.model}, {"serving", e.serving}, {"plugins", e.plugins}});
    w["engines"] = std::move(engines);
    workers.push_back(std::move(w));
  }
  j["workers"] = std::move(workers);
  return j;
}

}  // namespace tokenhost
