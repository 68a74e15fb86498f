// The gateway's entry into a running deployment: the models it serves, admission, and each request's
// sequences started (through the router), waited on and cancelled (at the engine that holds them).
// The request module (host/request/) is its caller; it speaks C++, not HTTP. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/token_stream.hpp"
#include "experiments/experiment_table.hpp"
#include "manifest/deployment.hpp"
#include "metrics/metrics.hpp"
#include "server/admission.hpp"
#include "server/engine_table.hpp"
#include "server/traffic_recorder.hpp"

namespace tokenhost {

class Tokenizer;

// A model the gateway serves, as the request module needs it.
struct ServedModel {
  std::string name;
  std::vector<std::string> aliases;  // other names requests may give ([models.NAME] aliases)
  // The name clients see (/v1/models, responses' `model`): the first alias, else the name.
  const std::string& id() const { return aliases.empty() ? name : aliases.front(); }
  uint32_t context_len = 0;
  uint32_t vocab_size = 0;
  std::shared_ptr<const Tokenizer> tokenizer;  // NULL for synthetic models: one token per byte
  std::string chat_template;                   // tokenizer.chat_template of a GGUF model, "" when absent
  // Every engine serving it slides a window (attention sinks): a sequence holds at most this many KV
  // positions, and context_len bounds no request. 0: no window.
  uint32_t window_cap = 0;
  int64_t created = 0;                   // Unix seconds the server loaded it
  // A model group ([groups.NAME]): the member models the router chooses among, in the manifest's
  // order; empty for a model. A group's tokenizer, vocabulary and template are its members' (they
  // share one), its context the smallest of theirs.
  std::vector<std::string> members;
  bool listed = true;  // in GET /v1/models: false for a model serving only as a group's member

  // Text to tokens (BOS first when add_bos and the model has one; special-token text parsed as those
  // tokens when parse_special) and one token back to its bytes (control tokens give "").
  std::vector<int32_t> encode(const std::string& text, bool add_bos, bool parse_special) const;
  std::string piece(int32_t token) const;
};

struct GatewayInit {
  caf::actor_system* system = nullptr;
  router_actor router;
  std::shared_ptr<EngineTable> engines;
  std::vector<ServedModel> models;  // in name order
  std::shared_ptr<experiments::ExperimentTable> experiments;
  GatewayLimits limits;
  metrics::Registry* metrics = nullptr;
  // POST /v1/embeddings: each input's embedding on a model (server.cpp: one input at a time, on the
  // caller's thread). Throws std::exception with what failed.
  std::function<std::vector<std::vector<float>>(const std::string& model, const std::vector<std::vector<int32_t>>& inputs)> embed;
  std::shared_ptr<TrafficRecorder> recorder;  // [server] record_traffic; NULL: none
};

class Gateway {
 public:
  explicit Gateway(GatewayInit init);
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // --- Requests ---
  // A fresh sequence id (GenerateRequest::id): unique in this server, one per choice of a request.
  uint64_t next_sequence_id() { return ++sequence_ids_; }
  // Admits a request of `ask` (its pool_tokens filled here from the engines of ask.model), or says why
  // not (server/admission.hpp). Hold the ticket until the request's last sequence ends.
  std::variant<std::shared_ptr<AdmissionTicket>, AdmissionRefusal> admit(AdmissionAsk ask);
  // Counts a request refused before admission (tokenhost_gateway_refusals_total{reason}).
  void count_refusal(const std::string& reason) { refusals_->add({reason}, 1); }
  // Why a request for `model` asking for A/B arm `arm` would be refused; "" when it would not.
  std::string check_arm_choice(const std::string& model, const std::string& arm) const;
  // Starts one sequence and returns at once: its tokens arrive on the returned stream as the engine
  // samples them, then its result (always: an error result if the server stops first).
  std::shared_ptr<TokenStream> start(GenerateRequest request);
  // Ends sequence `id` as "cancelled" and frees its KV blocks: the router passes the cancel to the
  // one engine that holds it.
  void cancel(uint64_t id);
  // Runs one sequence and waits for its result (in-process callers: the tests, the CLI).
  GenerateResult generate(GenerateRequest request, std::chrono::milliseconds timeout = std::chrono::minutes(10));

  // The embeddings of inputs (token lists) on model, a group's first member for a group (the request
  // module checked the tokens and lengths). Blocks while they are computed.
  std::vector<std::vector<float>> embed(const std::string& model, const std::vector<std::vector<int32_t>>& inputs) {
    const ServedModel* m = find_model(model);
    return embed_(m != nullptr && !m->members.empty() ? m->members.front() : model, inputs);
  }

  // --- Models ---
  // The models engines serve, in name order; find_model("") is the default (the first engine's).
  const std::vector<ServedModel>& models() const { return models_; }
  const ServedModel* find_model(const std::string& name) const;
  // Text to tokens and back with the default model's tokenizer (one token per byte for synthetic models).
  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& tokens) const;

  const GatewayLimits& limits() const { return limits_; }
  // Where finished requests are recorded ([server] record_traffic); NULL when they are not.
  TrafficRecorder* recorder() const { return recorder_.get(); }
  nlohmann::json admission_status() const { return admission_->status(); }

  // --- Lifecycle (the server's) ---
  bool accepting() const { return accepting_.load(); }
  // What /health and /ready say. ok: accepting, every engine serving; degraded: accepting, some
  // engines down (which, and why) while every served model keeps one; failing: a served model has no
  // engine taking requests (which), or the server shuts down (not accepting).
  struct Health {
    enum class State { ok, degraded, failing } state = State::failing;
    struct Down {
      std::string engine, reason;
      std::string state;  // "restarting", "quarantined", "hung" (server/engine_supervisor.hpp), or "down"
    };
    std::vector<Down> down_engines;
    std::vector<std::string> models_without_engine;
    const char* name() const { return state == State::ok ? "ok" : state == State::degraded ? "degraded" : "failing"; }
  };
  Health health() const;
  size_t in_flight() const { return in_flight_.load(); }
  // Takes no new request, lets the router fail waiting ones, and waits up to grace for the running
  // ones; those left then end with an error. Returns how many were left.
  size_t drain(std::chrono::milliseconds grace);

 private:
  const ServedModel& default_model() const;
  // Ends every stream not yet finished with an error: nothing will finish them once the actors stop.
  void fail_open_streams(const std::string& why);

  caf::actor_system& system_;
  router_actor router_;
  std::shared_ptr<EngineTable> engines_;
  std::vector<ServedModel> models_;
  std::shared_ptr<experiments::ExperimentTable> experiments_;
  GatewayLimits limits_;
  std::shared_ptr<TrafficRecorder> recorder_;
  metrics::Family* refusals_ = nullptr;
  std::function<std::vector<std::vector<float>>(const std::string&, const std::vector<std::vector<int32_t>>&)> embed_;
  std::unique_ptr<Admission> admission_;
  std::atomic<bool> accepting_{true};
  std::atomic<bool> stopped_{false};  // drained: what is still open ends with an error
  std::atomic<size_t> in_flight_{0};
  std::atomic<uint64_t> sequence_ids_{0};
  std::mutex open_mutex_;
  std::map<uint64_t, std::weak_ptr<TokenStream>> open_;  // started, not yet finished, by sequence id
};

}  // namespace tokenhost
