#include "speculation/draft_sessions.hpp"

#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

#include "backends/backend.hpp"
#include "plugin/step_plugins.hpp"

namespace tokenhost {

// The most tokens one session drafts in one run (th_draft_run_args.max_draft).
constexpr uint32_t kMaxDraftRun = 64;

struct DraftSessions::Model {
  std::string name;
  uint32_t n_layers = 0;
  std::shared_ptr<const ModelWeights> weights;  // cut to n_layers
  SlotInstances plugins;  // its attention and kvcache instances
  PluginInstance& kvcache() const { return *plugins.get(slot_of(TH_KIND_KVCACHE)); }
  uint32_t sessions = 0;
  uint64_t tokens_drafted = 0, tokens_computed = 0;
};

DraftSessions::DraftSessions(DraftSessionsInit init) : init_(std::move(init)) {}

DraftSessions::~DraftSessions() {
  for (auto& [id, s] : sessions_) drop_cache(s);
}

DraftSessions::Model& DraftSessions::model_for(const std::string& name, const std::shared_ptr<const ModelWeights>& full,
                                               uint32_t n_layers) {
  auto key = std::make_pair(name, n_layers);
  if (auto it = models_.find(key); it != models_.end()) return *it->second;
  auto m = std::make_unique<Model>();
  m->name = name;
  m->n_layers = n_layers;
  if (n_layers < full->layers.size()) {
    // Early exit: the same weights (views), the layers after the first n_layers left out.
    auto cut = std::make_shared<ModelWeights>(*full);
    cut->layers.resize(n_layers);
    cut->spec.info.n_layers = n_layers;
    m->weights = std::move(cut);
  } else {
    m->weights = full;
  }
  const ModelSpec spec = m->weights->spec.with_kv_dtype(init_.kv_dtype);
  for (th_kind kind : {TH_KIND_ATTENTION, TH_KIND_KVCACHE}) m->plugins.set(slot_of(kind), init_.make_instance(slot_of(kind), spec));
  spdlog::info("engine {}: draft model {} ({} of {} layers) ready, its own KV pool from {}", init_.engine, name,
               n_layers, full->layers.size(), m->kvcache().id());
  return *models_.emplace(key, std::move(m)).first->second;
}

th_status DraftSessions::open(const th_draft_open_args& args, uint64_t& session, std::string& why) {
  std::lock_guard lock(mutex_);
  const std::string name = args.model != nullptr && args.model[0] != '\0' ? args.model : init_.model;
  std::shared_ptr<const ModelWeights> full, own;
  try {
    full = init_.weights(name);
    own = init_.weights(init_.model);
  } catch (const std::exception& e) {
    why = "model '" + name + "': " + e.what();
    return TH_ERR_INTERNAL;
  }
  if (!full) {
    why = "no model '" + name + "' in the deployment";
    return TH_ERR_NOT_FOUND;
  }
  if (own && full->spec.info.vocab_size != own->spec.info.vocab_size) {
    why = "model '" + name + "' has a vocabulary of " + std::to_string(full->spec.info.vocab_size) +
          " tokens, the engine's model '" + init_.model + "' " + std::to_string(own->spec.info.vocab_size) +
          ": a draft model must share the target's tokenizer";
    return TH_ERR_INVALID_ARGUMENT;
  }
  const uint32_t layers = uint32_t(full->layers.size());
  if (args.n_layers > layers) {
    why = "n_layers " + std::to_string(args.n_layers) + " is more than model '" + name + "' has (" +
          std::to_string(layers) + ")";
    return TH_ERR_INVALID_ARGUMENT;
  }
  Model* m = nullptr;
  try {
    m = &model_for(name, full, args.n_layers == 0 ? layers : args.n_layers);
  } catch (const std::exception& e) {
    why = std::string("draft model '") + name + "': " + e.what();
    return TH_ERR_INTERNAL;
  }
  session = next_session_++;
  Session& s = sessions_[session];
  s.model = m;
  s.kv_seq = next_kv_seq_++;
  ++m->sessions;
  return TH_OK;
}

th_status DraftSessions::append(uint64_t session, const int32_t* tokens, uint32_t n, std::string& why) {
  std::lock_guard lock(mutex_);
  Session& s = sessions_.at(session);
  const th_model_info& info = s.model->weights->spec.info;
  for (uint32_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || uint32_t(tokens[i]) >= info.vocab_size) {
      why = "token " + std::to_string(tokens[i]) + " (at " + std::to_string(i) + ") is outside the vocabulary of " +
            std::to_string(info.vocab_size);
      return TH_ERR_INVALID_ARGUMENT;
    }
  if (s.tokens.size() + n >= info.context_len) {
    why = std::to_string(s.tokens.size() + n) + " tokens reach the context of model '" + s.model->name + "' (" +
          std::to_string(info.context_len) + ")";
    return TH_ERR_RESOURCE_EXHAUSTED;
  }
  s.tokens.insert(s.tokens.end(), tokens, tokens + n);
  return TH_OK;
}

th_status DraftSessions::rollback(uint64_t session, uint32_t n, std::string& why) {
  std::lock_guard lock(mutex_);
  Session& s = sessions_.at(session);
  if (n > s.tokens.size()) {
    why = "the session holds " + std::to_string(s.tokens.size()) + " tokens, fewer than " + std::to_string(n);
    return TH_ERR_INVALID_ARGUMENT;
  }
  s.tokens.resize(n);  // the cache is cut at the next run, to what still matches
  return TH_OK;
}

void DraftSessions::close(uint64_t session) {
  std::lock_guard lock(mutex_);
  auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  drop_cache(it->second);
  --it->second.model->sessions;
  sessions_.erase(it);
}

void DraftSessions::drop_cache(Session& s) {
  const PluginInstance& kv = s.model->kvcache();
  kv.call(&th_kvcache_vtable::seq_free, "seq_free", kv.handle(), s.kv_seq);
  s.cached.clear();
}

void DraftSessions::cut_cache(Session& s, uint32_t keep) {
  if (keep >= s.cached.size()) return;
  const PluginInstance& kv = s.model->kvcache();
  th_error err;
  if (keep == 0 || kv.fn(&th_kvcache_vtable::seq_truncate) == nullptr ||
      kv.call(&th_kvcache_vtable::seq_truncate, "seq_truncate", kv.handle(), s.kv_seq, keep, &err) != TH_OK) {
    drop_cache(s);
    return;
  }
  s.cached.resize(keep);
}

std::vector<std::pair<size_t, std::vector<float>>> DraftSessions::feed_pass(Model& m, const std::vector<Session*>& sessions,
                                                                           const std::vector<size_t>& members,
                                                                           std::vector<std::vector<int32_t>>& feed, bool sample) {
  const PluginInstance& kv = m.kvcache();
  StepBatch batch;
  std::vector<size_t> fed;
  for (size_t k : members) {
    const size_t n = sample ? feed[k].size() : feed[k].size() > init_.prefill_chunk ? init_.prefill_chunk : 0;
    if (n == 0) continue;
    Session& s = *sessions[k];
    StepItem item;
    item.seq_id = s.kv_seq;
    item.start = uint32_t(s.cached.size());
    item.tokens.assign(feed[k].begin(), feed[k].begin() + n);
    item.sample = sample;
    th_error err;
    if (kv.call(&th_kvcache_vtable::seq_reserve, "seq_reserve", kv.handle(), item.seq_id, item.start + uint32_t(n), item.start, &err) !=
        TH_OK) {  // no room in the pool: no draft for it this time
      drop_cache(s);
      feed[k].clear();
      continue;
    }
    m.tokens_computed += n;
    batch.items.push_back(std::move(item));
    fed.push_back(k);
  }
  if (fed.empty()) return {};
  const StepPlugins plugins{&m.plugins};
  std::vector<std::vector<float>> logits = init_.backend->run_step(*m.weights, batch, plugins);
  std::vector<std::pair<size_t, std::vector<float>>> out;
  for (size_t i = 0; i < fed.size(); ++i) {
    Session& s = *sessions[fed[i]];
    const std::vector<int32_t>& t = batch.items[i].tokens;
    s.cached.insert(s.cached.end(), t.begin(), t.end());
    feed[fed[i]].erase(feed[fed[i]].begin(), feed[fed[i]].begin() + std::ptrdiff_t(t.size()));
    out.emplace_back(fed[i], sample ? std::move(logits.at(i)) : std::vector<float>{});
  }
  return out;
}

th_status DraftSessions::run(const std::vector<uint64_t>& ids, const th_draft_run_args& args, std::string& why) {
  std::lock_guard lock(mutex_);
  if (args.max_draft == 0 || args.max_draft > kMaxDraftRun) {
    why = "max_draft " + std::to_string(args.max_draft) + " is outside 1.." + std::to_string(kMaxDraftRun);
    return TH_ERR_INVALID_ARGUMENT;
  }
  if (!(args.min_prob >= 0.0f && args.min_prob <= 1.0f)) {
    why = "min_prob " + std::to_string(args.min_prob) + " is outside [0, 1]";
    return TH_ERR_INVALID_ARGUMENT;
  }
  std::vector<Session*> sessions;
  for (size_t k = 0; k < ids.size(); ++k) {
    Session& s = sessions_.at(ids[k]);
    const std::string which = "sessions[" + std::to_string(k) + "]";
    if (std::find(sessions.begin(), sessions.end(), &s) != sessions.end()) {
      why = which + " appears twice";
      return TH_ERR_INVALID_ARGUMENT;
    }
    if (s.tokens.empty()) {
      why = which + " holds no token to draft after";
      return TH_ERR_INVALID_ARGUMENT;
    }
    if (args.n_draft[k] > args.max_draft) {
      why = "n_draft[" + std::to_string(k) + "] is " + std::to_string(args.n_draft[k]) + ", above max_draft " +
            std::to_string(args.max_draft);
      return TH_ERR_INVALID_ARGUMENT;
    }
    sessions.push_back(&s);
    args.n_written[k] = 0;
  }
  // Sessions of one draft model run together; each model's group in its own passes.
  std::map<Model*, std::vector<size_t>> groups;
  for (size_t k = 0; k < sessions.size(); ++k)
    if (args.n_draft[k] > 0) groups[sessions[k]->model].push_back(k);
  for (auto& [model, members] : groups) {
    Model& m = *model;
    const uint32_t context = m.weights->spec.info.context_len, vocab = m.weights->spec.info.vocab_size;
    try {
      // What each session feeds first: its tokens past the longest prefix its cache still holds; at least
      // its last token, whose logits give the first draft token.
      std::vector<std::vector<int32_t>> feed(sessions.size());
      for (size_t k : members) {
        Session& s = *sessions[k];
        size_t common = 0;
        while (common < s.cached.size() && common < s.tokens.size() && s.cached[common] == s.tokens[common]) ++common;
        common = std::min(common, s.tokens.size() - 1);
        cut_cache(s, uint32_t(common));
        feed[k].assign(s.tokens.begin() + s.cached.size(), s.tokens.end());
      }
      // Long feeds (a new session's prompt) first, in chunks, without logits.
      while (!feed_pass(m, sessions, members, feed, false).empty()) {
      }
      // Then one token per pass for every session still drafting.
      for (;;) {
        auto fed = feed_pass(m, sessions, members, feed, true);
        if (fed.empty()) break;
        for (const auto& [k, l] : fed) {
          Session& s = *sessions[k];
          if (l.size() < vocab) throw std::runtime_error("the forward pass returned short logits");
          const auto best = std::max_element(l.begin(), l.begin() + vocab);
          const int32_t token = int32_t(best - l.begin());
          double sum = 0;
          for (uint32_t v = 0; v < vocab; ++v) sum += std::exp(double(l[v]) - double(*best));
          const float prob = float(1.0 / sum);
          if (prob < args.min_prob) continue;
          const size_t at = k * args.max_draft + args.n_written[k];
          args.tokens[at] = token;
          if (args.probs != nullptr) args.probs[at] = prob;
          ++args.n_written[k];
          ++m.tokens_drafted;
          // The next token is drafted after this one, at the next position: within the context.
          if (args.n_written[k] < args.n_draft[k] && s.cached.size() < context) feed[k] = {token};
        }
      }
    } catch (const std::exception& e) {
      for (size_t k : members) drop_cache(*sessions[k]);
      why = "draft model '" + m.name + "': " + e.what();
      return TH_ERR_INTERNAL;
    }
  }
  return TH_OK;
}

std::vector<DraftModelStatus> DraftSessions::status() const {
  std::lock_guard lock(mutex_);
  std::vector<DraftModelStatus> out;
  for (const auto& [key, m] : models_) {
    DraftModelStatus st;
    st.model = m->name;
    st.n_layers = m->n_layers;
    st.sessions = m->sessions;
    th_kv_stats kv{};
    kv.struct_size = sizeof kv;
    m->kvcache().call(&th_kvcache_vtable::stats, "stats", m->kvcache().handle(), &kv);
    st.blocks_used = kv.used_blocks;
    st.blocks_total = kv.total_blocks;
    st.tokens_drafted = m->tokens_drafted;
    st.tokens_computed = m->tokens_computed;
    out.push_back(st);
  }
  return out;
}

}  // namespace tokenhost
