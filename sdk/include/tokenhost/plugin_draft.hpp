// tokenhost plugin SDK: a speculative decoding proposer that drafts with a model the host runs
// (th_host_api draft sessions, ABI 1.5), header-only C++17.
//
// sdk::DraftSessionProposer keeps one draft session per sequence in step with the sequence's tokens
// (rolled back to the longest prefix it still shares with them, the rest appended: the draft tokens the
// target accepted are reused by the host, not computed again) and drafts every sequence of a step in
// one batched draft_run. A plugin gives it the model to open (a draft model of the deployment, or the
// engine's own first layers) and puts sdk::draft_propose / draft_seq_end in its vtable. It adds no ABI.
#ifndef TOKENHOST_PLUGIN_DRAFT_HPP
#define TOKENHOST_PLUGIN_DRAFT_HPP

#include <tokenhost/plugin_spec.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace tokenhost::sdk {

class DraftSessionProposer {
 public:
  // model: a model of the deployment ("" the engine's own); n_layers: 0 every layer, else the first
  // n_layers (early exit); min_prob: th_draft_run_args.min_prob. Opens (and closes) one session to
  // check them: throws Error with the host's status, so that create() fails with the host's reason
  // (written to err: create()'s, see sdk::create_instance).
  DraftSessionProposer(const th_create_args& args, th_error* err, std::string plugin_id, std::string model,
                       uint32_t n_layers, float min_prob)
      : ctx_(args.host_ctx), id_(std::move(plugin_id)), model_(std::move(model)), n_layers_(n_layers), min_prob_(min_prob) {
    if (!TH_HAS_MEMBER(&host(), th_host_api, draft_close))
      throw Error(TH_ERR_UNSUPPORTED, id_ + ": the host has no draft sessions (ABI 1.5)");
    th_draft_session* probe = open(err);
    host().draft_close(probe);
  }
  ~DraftSessionProposer() {
    for (auto& [id, seq] : seqs_) host().draft_close(seq.session);
  }
  DraftSessionProposer(const DraftSessionProposer&) = delete;
  DraftSessionProposer& operator=(const DraftSessionProposer&) = delete;

  // Drafts a chain for each sequence of args that may take one; err is propose()'s (the host's
  // messages land in it). Throws Error when a host call fails: the step then has no drafts.
  void propose(const th_spec_propose_args* args, th_error* err) {
    check_propose_args(id_.c_str(), args);
    std::vector<th_draft_session*> sessions;
    std::vector<uint32_t> want, which;
    for (uint32_t k = 0; k < args->n_seqs; ++k) {
      args->drafts[k].n_draft = 0;
      const th_spec_seq& seq = args->seqs[k];
      const uint32_t bound = seq_max_draft(args, k);
      if (bound == 0 || seq.n_tokens == 0) continue;
      if (!sync(seq, err)) continue;  // the draft model's context is full: no draft for it
      sessions.push_back(seqs_.at(seq.seq_id).session);
      want.push_back(bound);
      which.push_back(k);
    }
    if (sessions.empty()) return;
    const uint32_t stride = args->max_draft;
    std::vector<int32_t> tokens(sessions.size() * stride);
    std::vector<uint32_t> written(sessions.size());
    th_draft_run_args run{};
    run.struct_size = sizeof run;
    run.n_sessions = uint32_t(sessions.size());
    run.sessions = sessions.data();
    run.n_draft = want.data();
    run.max_draft = stride;
    run.min_prob = min_prob_;
    run.tokens = tokens.data();
    run.n_written = written.data();
    if (th_status s = host().draft_run(ctx_, &run, err)) throw Error(s, id_ + ": draft_run failed");
    for (size_t i = 0; i < sessions.size(); ++i) {
      th_spec_draft& draft = args->drafts[which[i]];
      const uint32_t n = std::min(written[i], want[i]);
      for (uint32_t j = 0; j < n; ++j) {
        draft.tokens[j] = tokens[i * stride + j];
        draft.parents[j] = int32_t(j) - 1;
      }
      draft.n_draft = n;
    }
  }

  // The sequence ended: its session is closed (its keys and values freed).
  void seq_end(uint64_t seq_id) {
    auto it = seqs_.find(seq_id);
    if (it == seqs_.end()) return;
    host().draft_close(it->second.session);
    seqs_.erase(it);
  }

  size_t open_sessions() const { return seqs_.size(); }

 private:
  struct Seq {
    th_draft_session* session = nullptr;
    std::vector<int32_t> tokens;  // appended to the session
  };

  th_draft_session* open(th_error* err) {
    th_draft_open_args a{};
    a.struct_size = sizeof a;
    a.model = model_.c_str();
    a.n_layers = n_layers_;
    th_draft_session* session = nullptr;
    if (th_status s = host().draft_open(ctx_, &a, &session, err))
      throw Error(s, id_ + ": cannot open a draft session on model '" + (model_.empty() ? "(the engine's)" : model_) +
                         "' (" + (n_layers_ == 0 ? std::string("every layer") : std::to_string(n_layers_) + " layers") + ")");
    return session;
  }

  // Brings the sequence's session to its tokens; false when they no longer fit the draft model's context.
  bool sync(const th_spec_seq& seq, th_error* err) {
    auto it = seqs_.find(seq.seq_id);
    if (it == seqs_.end()) it = seqs_.emplace(seq.seq_id, Seq{open(err), {}}).first;
    Seq& s = it->second;
    size_t common = 0;
    while (common < s.tokens.size() && common < seq.n_tokens && s.tokens[common] == seq.tokens[common]) ++common;
    if (common < s.tokens.size()) {
      if (th_status st = host().draft_rollback(s.session, uint32_t(common), err)) throw Error(st, id_ + ": draft_rollback failed");
      s.tokens.resize(common);
    }
    if (common < seq.n_tokens) {
      const th_status st = host().draft_append(s.session, seq.tokens + common, uint32_t(seq.n_tokens - common), err);
      if (st == TH_ERR_RESOURCE_EXHAUSTED) return false;
      if (st != TH_OK) throw Error(st, id_ + ": draft_append failed");
      s.tokens.insert(s.tokens.end(), seq.tokens + common, seq.tokens + seq.n_tokens);
    }
    return true;
  }

  th_host_ctx* ctx_;
  std::string id_, model_;
  uint32_t n_layers_;
  float min_prob_;
  std::map<uint64_t, Seq> seqs_;
};

// The vtable's propose() and seq_end() for a plugin whose instance class Impl (made by
// sdk::create_instance<Impl>) holds its DraftSessionProposer as the member `sessions`.
template <class Impl>
th_status draft_propose(th_instance* instance, const th_spec_propose_args* args, th_error* err) noexcept {
  return guard(err, [&] { self<Impl>(instance).sessions.propose(args, err); });
}
template <class Impl>
void draft_seq_end(th_instance* instance, uint64_t seq_id) noexcept {
  guard(nullptr, [&] { self<Impl>(instance).sessions.seq_end(seq_id); });
}

}  // namespace tokenhost::sdk

#endif  // TOKENHOST_PLUGIN_DRAFT_HPP
