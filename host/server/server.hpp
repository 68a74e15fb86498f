// A running deployment: the actor system, one engine (scheduler actor + worker actor) per
// [engines.*], the router, the plugin registry (it owns the catalog), the metrics registry and the operations the admin API
// offers (status, swap, load and unload of a slot). HTTP lives in http/; this class speaks C++.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/messages.hpp"
#include "actors/token_stream.hpp"
#include "experiments/experiment_table.hpp"
#include "manifest/deployment.hpp"
#include "metrics/metrics.hpp"
#include "runtime/model_weights.hpp"
#include "server/admission.hpp"

namespace tokenhost {

class Tokenizer;
class DraftSessions;

// An admin operation that was refused: the HTTP status it maps to, and why. Nothing was changed.
struct AdminError : std::runtime_error {
  AdminError(int status, const std::string& message) : std::runtime_error(message), http_status(status) {}
  int http_status;
};

// A model the gateway serves, as the API layer needs it.
struct ServedModel {
  std::string name;
  uint32_t context_len = 0;
  uint32_t vocab_size = 0;
  const Tokenizer* tokenizer = nullptr;  // NULL for synthetic models: one token per byte
  std::string chat_template;             // tokenizer.chat_template of a GGUF model, "" when absent
  // Every engine serving it slides a window (attention sinks): a sequence holds at most this many KV
  // positions, and context_len bounds no request. 0: no window.
  uint32_t window_cap = 0;
  int64_t created = 0;                   // Unix seconds the server loaded it

  // Text to tokens (BOS first when add_bos and the model has one; special-token text parsed as those
  // tokens when parse_special) and one token back to its bytes (control tokens give "").
  std::vector<int32_t> encode(const std::string& text, bool add_bos, bool parse_special) const;
  std::string piece(int32_t token) const;
};

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
  caf::actor_system& system() { return *system_; }

  // Runs one request through router, engine and worker; blocks the calling (HTTP) thread.
  GenerateResult generate(GenerateRequest request, std::chrono::milliseconds timeout = std::chrono::minutes(10));
  // Starts one request and returns at once: its tokens arrive on the returned stream as the engine
  // samples them, then its result (always: an error result if the server stops first). Cancelling the
  // stream (or cancel(id)) ends the sequence and frees its KV blocks.
  std::shared_ptr<TokenStream> start(GenerateRequest request);
  void cancel(uint64_t request_id);
  // Waits on a stream as the HTTP layer does: returns at the next update, after `timeout`, or with
  // an error result once the server has stopped.
  TokenStream::Update wait(TokenStream& stream, size_t seen, std::chrono::milliseconds timeout);
  uint64_t next_request_id() { return ++request_ids_; }
  // Admits a request of `ask` (its pool_tokens filled here from the engines of ask.model), or says why
  // not (server/admission.hpp). Hold the ticket until the request's last sequence ends.
  std::variant<std::shared_ptr<AdmissionTicket>, AdmissionRefusal> admit(AdmissionAsk ask);
  const GatewayLimits& limits() const { return deployment_.limits; }
  // Counts a request the gateway refused before admission (tokenhost_gateway_refusals_total{reason}).
  void count_refusal(const std::string& reason) { refusals_->add({reason}, 1); }
  // Text to tokens and back with the served model's tokenizer (one token per byte for synthetic
  // models). Thread-safe.
  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& tokens) const;
  // The models engines serve, in name order; find_model("") is the default (the first engine's).
  const std::vector<ServedModel>& models() const { return served_; }
  const ServedModel* find_model(const std::string& name) const;

  // Engines, their plugins and versions, and the router, as JSON.
  nlohmann::json status();
  // Plugins in the catalog and the libraries open now.
  nlohmann::json plugins();
  // Makes the plugin declared by the plugin.toml at manifest_path known (a plugin installed outside
  // the search paths, or a new version); returns its id. Throws AdminError when it does not read.
  std::string register_plugin(const std::string& manifest_path);

  // Puts plugin (with config) into slot of engine: swaps the current plugin, or loads one into an
  // empty optional slot. The new plugin is validated, loaded, checked and created before anything
  // changes; any failure throws AdminError and leaves the server as it was. engine "" with slot
  // "router" targets the router. Returns a description of the change.
  std::string set_slot(const std::string& engine, const std::string& slot, const std::string& plugin,
                       const toml::table& config);
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
  // drain(grace), then stop().
  void shutdown(std::chrono::milliseconds grace = std::chrono::seconds(30));
  bool accepting() const { return accepting_.load(); }
  size_t in_flight() const { return in_flight_.load(); }

 private:
  struct Engine {
    EngineDecl decl;
    engine_actor actor;
    worker_actor worker;
    std::shared_ptr<std::atomic<bool>> stopped;  // set when the engine actor has terminated
    uint64_t kv_positions = 0;  // its KV pool: blocks x block size, as its worker reported at start
    bool prefix_cache = false;  // its kvcache plugin caches prefixes (EngineInit::prefix_cache)
    std::shared_ptr<PrefixSummary> prefix_summary;  // what that cache holds, for the router; NULL without one
    uint32_t window_cap = 0;  // a sliding window's positions per sequence at most (EngineInit::window); 0: none
  };
  // Makes the plugin instances, worker and engine actor of decl (its model's weights loaded once).
  // Throws PluginError; nothing of it is left running then.
  Engine build_engine(const EngineDecl& decl, uint64_t kvcache_swap_requested_ns = 0);
  // Retires engine `name` (replaced by `successor` when given, else removed): the router stops sending
  // it requests and it stops once the ones it has are done; it stays in retired_ until then.
  SwapResult retire_engine(const std::string& name, const Engine* successor);
  std::string replace_engine_for(const std::string& engine, const SlotDecl& kvcache, uint64_t requested_ns);
  void prune_retired();  // forget retired engines that have stopped; needs engines_mutex_
  std::vector<engine_actor> all_engine_actors();  // live and retiring, for cancel and stop
  // An instance for slot; the library is opened through the registry unless given.
  std::shared_ptr<PluginInstance> make_instance(const EngineDecl* engine, const std::string& slot, const SlotDecl& decl,
                                                std::shared_ptr<PluginLibrary> library = nullptr);
  LoadReply load_library(const std::string& id);
  // Starts an experiment validated against the engines now; throws AdminError. Needs admin_mutex_
  // (or the constructor).
  void start_experiment_checked(const experiments::ExperimentSpec& spec);
  std::vector<experiments::EngineView> engine_views() const;
  void label_arms();  // /metrics: every engine series carries its experiment and arm
  SwapResult send_swap(const std::string& engine, SlotSwap swap);
  template <class Actor, class... Ts>
  StatusJson ask_status_of(const Actor& target, Ts... message);

  Deployment deployment_;
  metrics::Registry metrics_;
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  std::map<std::string, std::shared_ptr<const ModelWeights>> weights_;  // one copy per model, as loaded
  // As each device's backend computes with them, by (model, device): shared by the engines there.
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const ModelWeights>> placed_weights_;
  std::map<std::string, std::shared_ptr<const Tokenizer>> tokenizers_;  // gguf models
  // Draft sessions (th_host_api.draft_*) by engine: what the instances of its spec_decode slot draft
  // with. Made with the engine (build_engine), replaced when it is rebuilt.
  std::map<std::string, std::shared_ptr<DraftSessions>> draft_sessions_;
  // A model of the deployment as a draft model, placed on a device: loaded (or generated) on first use,
  // from any engine's thread. NULL when the deployment has no such model.
  std::shared_ptr<const ModelWeights> draft_model_weights(const std::string& model, const std::string& device);
  std::mutex draft_weights_mutex_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const ModelWeights>> draft_weights_;
  const ServedModel& default_model() const;
  std::vector<ServedModel> served_;
  std::map<std::string, Engine> engines_;  // taking requests, by name
  std::vector<Engine> retired_;            // removed or replaced, finishing their requests
  mutable std::mutex engines_mutex_;       // engines_ and retired_: admin changes vs gateway reads
  std::shared_ptr<experiments::ExperimentTable> experiments_;
  router_actor router_;
  registry_actor registry_;
  std::mutex admin_mutex_;  // one admin change at a time
  std::atomic<bool> accepting_{true};
  std::atomic<bool> stopped_{false};  // actors stopped: waiting requests end
  std::atomic<size_t> in_flight_{0};
  std::atomic<uint64_t> request_ids_{0};
  metrics::Family* refusals_ = nullptr;
  std::unique_ptr<Admission> admission_;
  std::once_flag drain_once_, stop_once_;
};

}  // namespace tokenhost
