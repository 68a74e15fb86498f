// Draft sessions (th_host_api.draft_*, ABI 1.5): the models an engine's proposer drafts with, run by the
// host. One DraftSessions per engine; per draft model (a model of the deployment, or the engine's own
// model cut after its first layers) a KV pool of its own, made with the engine's kvcache and attention
// plugins, and the sessions on it. Every session keeps the tokens the plugin appended and the tokens
// whose keys and values its cache holds (the appended ones it has computed, then the tokens it drafted
// after them): the next run computes only what differs, so the draft tokens the target accepted cost
// nothing again.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plugin/host_api.hpp"
#include "plugin/instance.hpp"
#include "base/model_weights.hpp"
#include "base/step.hpp"

namespace tokenhost {

class Backend;

// What an engine's draft sessions run on.
struct DraftSessionsInit {
  std::string engine;
  std::string model;             // the engine's own model
  const Backend* backend = nullptr;  // the engine's
  th_dtype kv_dtype = TH_DTYPE_F16;  // the engine's
  // A model of the deployment as the engine's backend computes with it; NULL when there is no such
  // model. May be slow the first time (synthetic weights are generated). Throws std::runtime_error.
  std::function<std::shared_ptr<const ModelWeights>(const std::string& model)> weights;
  // An instance of the engine's plugin in `slot` (its attention or kvcache slot) for model `spec`. Throws.
  std::function<std::shared_ptr<PluginInstance>(SlotId slot, const ModelSpec& spec)> make_instance;
  uint32_t prefill_chunk = 256;  // appended tokens computed per session and forward pass, at most
};

// One draft model's pool for the admin status.
struct DraftModelStatus {
  std::string model;
  uint32_t n_layers = 0;
  uint32_t sessions = 0;
  uint32_t blocks_used = 0, blocks_total = 0;
  uint64_t tokens_drafted = 0, tokens_computed = 0;
};

class DraftSessions : public DraftSessionHost {
 public:
  explicit DraftSessions(DraftSessionsInit init);
  ~DraftSessions() override;

  th_status open(const th_draft_open_args& args, uint64_t& session, std::string& why) override;
  th_status append(uint64_t session, const int32_t* tokens, uint32_t n, std::string& why) override;
  th_status rollback(uint64_t session, uint32_t n, std::string& why) override;
  th_status run(const std::vector<uint64_t>& sessions, const th_draft_run_args& args, std::string& why) override;
  void close(uint64_t session) override;

  std::vector<DraftModelStatus> status() const;

 private:
  struct Model;
  struct Session {
    Model* model = nullptr;
    uint64_t kv_seq = 0;             // its sequence in the model's kvcache
    std::vector<int32_t> tokens;     // appended
    std::vector<int32_t> cached;     // whose keys and values the cache holds, in order
  };
  // The pool of `name` (weights `full`) cut to n_layers, made on first use. Throws std::runtime_error.
  Model& model_for(const std::string& name, const std::shared_ptr<const ModelWeights>& full, uint32_t n_layers);
  // Sets the cache of s to its first `keep` cached tokens (or empties it, for a kvcache without
  // seq_truncate).
  void cut_cache(Session& s, uint32_t keep);
  void drop_cache(Session& s);
  // One forward pass of m over the sessions `members` (indices into sessions) with something to feed:
  // with sample, each feeds all of its feed and gets its last token's logits; without, each whose feed
  // is longer than prefill_chunk feeds its next prefill_chunk tokens. Each session's positions are
  // reserved first; one the pool has no room for is left out, its cache dropped and its feed cleared.
  // What was fed moves from feed to the session's cache. Returns (member, logits) for each session fed
  // (logits empty without sample); nothing when none was fed. Throws std::runtime_error when it fails.
  std::vector<std::pair<size_t, std::vector<float>>> feed_pass(Model& m, const std::vector<Session*>& sessions,
                                                               const std::vector<size_t>& members,
                                                               std::vector<std::vector<int32_t>>& feed, bool sample);

  DraftSessionsInit init_;
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, uint32_t>, std::unique_ptr<Model>> models_;
  std::map<uint64_t, Session> sessions_;
  uint64_t next_session_ = 1, next_kv_seq_ = 1;
};

}  // namespace tokenhost
