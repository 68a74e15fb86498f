// A running deployment: the actor system, the plugin registry (it owns the catalog), the metrics
// registry, the router, and its parts, each with one job: the engines (server/engine_table.hpp, each an
// EngineHandle) that the EngineFactory builds, the Gateway (the entry for requests) and this class's
// own job, the operations the admin API offers (status, slot swaps, engines added and removed,
// experiments) and the server's lifecycle. HTTP lives in http/; this class speaks C++.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/messages.hpp"
#include "actors/token_stream.hpp"
#include "cluster/link.hpp"
#include "cluster/node_actor.hpp"
#include "experiments/experiment_table.hpp"
#include "manifest/deployment.hpp"
#include "metrics/metrics.hpp"
#include "routing/breaker.hpp"
#include "routing/overload.hpp"
#include "server/engine_factory.hpp"
#include "server/engine_supervisor.hpp"
#include "server/engine_table.hpp"
#include "server/fault_ledger.hpp"
#include "server/gateway.hpp"

namespace tokenhost {

class Generator;  // runtime/generator.hpp

// An admin operation that was refused: the HTTP status it maps to, and why. Nothing was changed.
struct AdminError : std::runtime_error {
  AdminError(int status, const std::string& message) : std::runtime_error(message), http_status(status) {}
  int http_status;
};

class RemoteEngine;

class Server {
 public:
  // Builds every actor and plugin instance of the deployment. Throws PluginError when a plugin cannot
  // be loaded, checked or created: the server does not start half-built.
  explicit Server(Deployment deployment);
  ~Server();  // shuts down if still running
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const Deployment& deployment() const { return deployment_; }
  metrics::Registry& metrics() { return metrics_; }
  // /metrics: the registry's text, with tokenhost_engine_up{engine} (1 serving, 0 down) read now.
  std::string prometheus_text();
  caf::actor_system& system() { return *system_; }

  // The engines, by name (server/engine_table.hpp).
  const EngineTable& engines() const { return *engines_; }
  // The entry for requests (server/gateway.hpp).
  Gateway& gateway() { return *gateway_; }
  const Gateway& gateway() const { return *gateway_; }

  // Engines, their plugins and versions, and the router, as JSON.
  nlohmann::json status();
  // Plugins in the catalog and the libraries open now.
  nlohmann::json plugins();
  // Makes the plugin declared by the plugin.toml at manifest_path known (a plugin installed outside
  // the search paths, or a new version); returns its id. Throws AdminError when it does not read.
  std::string register_plugin(const std::string& manifest_path);

  // The running deployment as a manifest serve accepts (manifest/manifest_export.hpp): what the admin
  // API changed since the start included. GET /admin/export, `tokenhost admin export`.
  std::string export_manifest();

  // Puts plugin (with config) into slot of engine: swaps the current plugin, or loads one into an
  // empty optional slot. The new plugin is validated, loaded, checked and created before anything
  // changes; any failure throws AdminError and leaves the server as it was. engine "" with slot
  // "router" targets the router. Returns a description of the change.
  std::string set_slot(const std::string& engine, const std::string& slot, const std::string& plugin,
                       const toml::table& config);
  // One layer of a stacking slot (kv_connector) of engine: replaces layer `position` with plugin,
  // inserts plugin before it (position == the stack's size appends), or removes it (plugin ignored).
  // Validated, loaded and created before anything changes, as set_slot; a layer with loads out is not
  // replaced nor removed (409). Returns a description of the change.
  static constexpr uint32_t kAppendLayer = UINT32_MAX;  // insert's position: after the last layer
  std::string change_layer(const std::string& engine, const std::string& slot, SlotSwap::LayerOp op, uint32_t position,
                           const std::string& plugin, const toml::table& config);
  // Empties an optional slot (spec_decode). Throws AdminError for required slots.
  std::string unload_slot(const std::string& engine, const std::string& slot);
  // Drops engine's prefix cache (th_kvcache_vtable.cache_flush): the cached blocks no sequence holds
  // are freed. AdminError 404 for an unknown engine, 409 when its kvcache keeps no prefix cache.
  std::string flush_prefix_cache(const std::string& engine);
  // Starts the engines that `toml_text` declares ([engines.NAME] tables in the manifest format, on
  // models the server serves) and routes to them. Every one is built before any takes a request; any
  // failure throws AdminError and leaves the server as it was. Returns a description.
  std::string add_engines(const std::string& toml_text, const std::string& source);
  // Routes no more to engine `name`, lets the requests it has finish, and stops it with its worker
  // and plugins; requests still running after `grace` end with an error. Returns when it has stopped.
  // Refuses (AdminError) an unknown engine and the last engine of a model.
  std::string remove_engine(const std::string& name, std::chrono::milliseconds grace);

  // A/B experiments (server_experiments.cpp). Each change is validated against the engines first; a
  // refusal throws AdminError (400 malformed, 404 unknown engine or experiment, 409 conflict) and
  // changes nothing.
  nlohmann::json experiments() const;  // GET /admin/experiments
  // Starts the experiment the admin API's JSON body defines; returns its list entry.
  nlohmann::json start_experiment(const nlohmann::json& body);
  std::string change_experiment(const std::string& name, const nlohmann::json& body);  // the split
  std::string stop_experiment(const std::string& name);  // its report stays readable
  nlohmann::json experiment_report(const std::string& name) const;
  // Why a request for `model` asking for arm `arm` would be refused; "" when it would not.
  std::string check_arm_choice(const std::string& model, const std::string& arm) const;

  // Stops taking requests and lets running ones finish (waiting ones end with an error); returns when
  // none is left or grace has passed (then the rest end with an error). Idempotent.
  void drain(std::chrono::milliseconds grace = std::chrono::seconds(30));
  // Stops every actor and the actor system. A thread that handed requests to the actor system keeps a
  // reference to CAF's logger until it exits, and the system waits for it: join such threads (the
  // HTTP pools) between drain() and stop(). Idempotent.
  void stop();
  // This node's part in a cluster ([cluster]; server_cluster.cpp): its name and role, the heads it
  // admitted, and each worker link's health with the engines it brought. null without [cluster].
  nlohmann::json cluster_status() const;

  // The router's guards (routing/breaker.hpp, routing/overload.hpp): GET /admin/guards gives their
  // policies, each engine's breaker and what the overload policy shed; change_guards applies a JSON
  // change ({"breakers": {...}, "overload": {...}}, the manifest's keys) whole or not at all (AdminError
  // 400 naming the key) and returns the guards as they are then.
  nlohmann::json guards() const;
  nlohmann::json change_guards(const nlohmann::json& change);

  // drain(grace), then stop().
  void shutdown(std::chrono::milliseconds grace = std::chrono::seconds(30));
  bool accepting() const;

 private:
  // Retires engine `name` (replaced by `successor` when given, else removed): the router stops sending
  // it requests and it stops once the ones it has are done; the table keeps it until then.
  SwapResult retire_engine(const std::string& name, const std::shared_ptr<EngineHandle>& successor);
  std::string replace_engine_for(const std::string& engine, const SlotDecl& kvcache, uint64_t requested_ns);
  // Starts an experiment validated against the engines now; throws AdminError. Needs admin_mutex_
  // (or the constructor).
  void start_experiment_checked(const experiments::ExperimentSpec& spec);
  std::vector<experiments::EngineView> engine_views() const;
  void label_arms();  // /metrics: every engine series carries its experiment and arm
  static SupervisionPolicy supervision_policy(const ServerDecl& server);  // from [server]
  // The model groups' entries among the served models ([groups]; their members checked to share a
  // tokenizer), then every entry in name order. Throws naming a group it cannot serve.
  void add_groups(std::vector<ServedModel>& served);
  // POST /v1/embeddings' computation (the gateway's embed): each input embedded on model, whose
  // embedder (EngineFactory::make_embedder) is made on first use.
  std::vector<std::vector<float>> embed(const std::string& model, const std::vector<std::vector<int32_t>>& inputs);
  // A router arm's instance (its plugin loaded, its config checked, created); refuses (AdminError)
  // naming the arm.
  std::shared_ptr<PluginInstance> make_arm_router(const experiments::ExperimentSpec& spec, size_t arm);
  // Builds an engine from decl in place of down engine `down` (its predecessor's last good plugins
  // kept), routes to it and puts it in the table. Throws std::runtime_error (nothing changed then).
  // Needs admin_mutex_.
  void install_rebuilt(const std::shared_ptr<EngineHandle>& down, const EngineDecl& decl);
  // The supervisor's rebuild (server/engine_supervisor.hpp): "" or why not.
  std::string rebuild_down_engine(const std::shared_ptr<EngineHandle>& down, const EngineDecl& decl);
  // An admin change of a down engine's slots: it is rebuilt with `decl`. Throws AdminError.
  std::string repair_engine(const std::shared_ptr<EngineHandle>& down, const EngineDecl& decl, const std::string& what);
  // An admin change's plugin for slot, read and checked with its config, its library opened (into
  // loaded) and a quarantine of it lifted; AdminError 400/422 when it cannot serve.
  SlotDecl slot_change(const std::string& plugin, const std::string& slot, const toml::table& config, LoadReply& loaded);
  // Asks the router (blocking up to 60 s); a failure to answer is a refused SwapResult.
  template <class... Ts>
  SwapResult ask_router(Ts... message);
  [[noreturn]] void no_such_engine(const std::string& name) const;
  // The cluster (server_cluster.cpp): a worker publishes its node actor, a head links to its workers
  // and routes to their engines (server/remote_engine.hpp) while their links are up.
  void start_cluster();
  void remote_joined(const std::string& node, const cluster::node_actor& actor, const std::vector<cluster::EngineInfo>& engines);
  void remote_left(const std::string& node, const std::string& why);
  // Brings the router's remote engines of node in line with what it runs (serving ones routed, the
  // others and those gone dropped); on the link's thread, after a join and at each heartbeat.
  void sync_remote_engines(const std::string& node, const std::vector<cluster::EngineInfo>& engines);
  // Drops one remote engine from the router and the table, ending what it runs in those words.
  void drop_remote_engine(const std::shared_ptr<EngineHandle>& e, const std::string& why);
  // Drops every remote engine of node (why); returns how many.
  size_t drop_remote_engines_of(const std::string& node, const std::string& why);
  // Ends the links to workers and the node actor (start-up failed, or the server stops).
  void stop_cluster();
  // This node's engines for a head, with the keys of the prefix summaries the head holds another
  // version of.
  std::vector<cluster::EngineInfo> local_engine_infos(const cluster::PrefixVersions& held) const;
  // The versions of node's engines' prefix summaries this head holds.
  cluster::PrefixVersions held_prefixes(const std::string& node) const;
  cluster::AdminReply change_slot_for_head(const cluster::SlotChange& c);
  cluster::NodeInit::Admitted admit_for_head(const std::string& engine, const GenerateRequest& r);
  std::string change_remote_slot(RemoteEngine& engine, const std::string& slot, const std::string& plugin, const toml::table* config);

  Deployment deployment_;
  metrics::Registry metrics_;
  // tokenhost_engine_up{engine}, registered with the server, set when /metrics is read (prometheus_text).
  metrics::Family& engine_up_ = metrics_.family(metrics::Type::gauge, "tokenhost_engine_up",
                                                "1 while the engine serves, 0 once it stopped unasked (a fault; GET /health says why)",
                                                {"engine"});
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  registry_actor registry_;
  router_actor router_;
  std::unique_ptr<EngineFactory> factory_;
  // The router's guards, from [breakers] and [overload]; the admin API changes their policies.
  std::shared_ptr<routing::BreakerBoard> breakers_ = std::make_shared<routing::BreakerBoard>(deployment_.guards.breakers, &metrics_);
  std::shared_ptr<routing::OverloadGuard> overload_ = std::make_shared<routing::OverloadGuard>(deployment_.guards.overload, &metrics_);
  std::shared_ptr<EngineTable> engines_ = std::make_shared<EngineTable>();
  std::shared_ptr<experiments::ExperimentTable> experiments_;
  std::unique_ptr<Gateway> gateway_;
  // The plugin faults that stopped engines, and the quarantine (server/fault_ledger.hpp).
  static constexpr uint32_t kQuarantineAfter = 3;  // faults of one plugin within 10 minutes
  FaultLedger faults_{kQuarantineAfter, std::chrono::minutes(10), &metrics_};
  std::unique_ptr<EngineSupervisor> supervisor_;  // rebuilds engines that stop unasked
  std::mutex admin_mutex_;  // one admin change at a time (the supervisor's rebuilds too)
  std::mutex embed_mutex_;  // embeddings: one at a time
  std::map<std::string, std::shared_ptr<Generator>> embedders_;  // by model, made on first use
  std::once_flag drain_once_, stop_once_;
  // The cluster's parts (empty without [cluster]).
  std::shared_ptr<const cluster::NodeIdentity> identity_;
  cluster::node_actor node_actor_;  // a worker's entry for heads
  struct WorkerLink {
    std::string name;
    cluster::link_actor actor;
    std::shared_ptr<cluster::LinkHealth> health;
  };
  std::vector<WorkerLink> links_;
  mutable std::mutex remote_mutex_;
  std::map<std::string, std::vector<cluster::EngineInfo>> remote_engines_;  // by worker: what it runs, as last heard
  std::map<std::string, cluster::node_actor> remote_nodes_;                 // by worker, while linked
  std::set<std::string> remote_unroutable_;  // ENGINE@NODE of a model this head does not serve (logged once)
};

}  // namespace tokenhost
