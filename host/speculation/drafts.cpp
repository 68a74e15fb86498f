#include "speculation/drafts.hpp"
#include "runtime/sampling.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "speculation/draft_limits.hpp"

namespace tokenhost {

void add_drafts(PluginInstance& spec, const DraftBounds& bounds, const std::vector<DraftCandidate>& candidates,
                StepBatch& batch, uint64_t& propose_failures) {
  uint32_t rows = 0;
  for (const auto& item : batch.items) rows += uint32_t(item.tokens.size());
  if (candidates.empty() || rows >= bounds.max_step_tokens) return;
  uint32_t max_draft = 0;
  for (const auto& c : candidates) max_draft = std::max(max_draft, std::min(c.max_draft, kMaxDraftTokens));
  if (max_draft == 0) return;
  const size_t n = candidates.size(), entries = n * max_draft, cap = kDraftDistCapacity;
  std::vector<th_spec_seq> seqs;
  std::vector<uint32_t> seq_max;
  for (const auto& c : candidates) {
    seqs.push_back(th_spec_seq{batch.items[c.item].seq_id, c.tokens->data(), uint32_t(c.tokens->size())});
    seq_max.push_back(std::min(c.max_draft, max_draft));
  }
  std::vector<int32_t> tokens(entries, -1), parents(entries, -2), dist_tokens(entries * cap, -1);
  std::vector<float> dist_probs(entries * cap, 0.0f);
  std::vector<uint32_t> dist_len(entries, 0);
  std::vector<th_spec_draft> drafts(n);
  for (size_t k = 0; k < n; ++k) drafts[k] = th_spec_draft{&tokens[k * max_draft], &parents[k * max_draft], 0};
  th_spec_propose_args args{};
  args.struct_size = sizeof args;
  args.seqs = seqs.data();
  args.n_seqs = uint32_t(n);
  args.max_draft = max_draft;
  args.drafts = drafts.data();
  args.seq_max_draft = seq_max.data();
  args.dist_capacity = uint32_t(cap);
  args.dist_tokens = dist_tokens.data();
  args.dist_probs = dist_probs.data();
  args.dist_len = dist_len.data();
  th_error err;
  if (th_status st = spec.call(&th_spec_decode_vtable::propose, "propose", spec.handle(), &args, &err)) {
    // Logged at the 1st, 10th, 100th, ... failure: a proposer failing every step must not flood the log.
    const uint64_t failures = ++propose_failures;
    const std::string digits = std::to_string(failures);
    if (digits[0] == '1' && digits.find_first_not_of('0', 1) == std::string::npos)
      spdlog::warn("engine {}: {} propose failed with status {}: {}; the step runs without drafts ({} failure{} so far)",
                   bounds.engine, spec.id(), int(st), err.text(), failures, failures == 1 ? "" : "s");
    return;
  }
  for (size_t k = 0; k < n; ++k) {
    StepItem& item = batch.items[candidates[k].item];
    const uint32_t room = std::min(bounds.max_step_tokens - rows, bounds.context_len - (item.start + 1));
    const size_t base = k * max_draft;
    const uint32_t offered = std::min(drafts[k].n_draft, seq_max[k]);
    uint32_t taken = 0;
    bool chain = true;
    while (taken < offered && taken < room && parents[base + taken] >= -1 && parents[base + taken] < int32_t(taken) &&
           tokens[base + taken] >= 0 && uint32_t(tokens[base + taken]) < bounds.vocab_size) {
      chain = chain && parents[base + taken] == int32_t(taken) - 1;
      ++taken;
    }
    if (taken == 0) continue;
    item.tokens.insert(item.tokens.end(), tokens.begin() + long(base), tokens.begin() + long(base + taken));
    item.n_draft = taken;
    item.logit_rows = taken + 1;
    rows += taken;
    if (!chain) {  // a tree: verified by exact match, its distributions unused
      item.draft_parent.assign(parents.begin() + long(base), parents.begin() + long(base + taken));
      if (rows >= bounds.max_step_tokens) break;
      continue;
    }
    bool any_dist = false;
    std::vector<DraftDistribution> dist(taken);
    for (uint32_t j = 0; j < taken; ++j) {
      const size_t e = base + j;
      if (dist_len[e] == 0 || dist_len[e] > cap) continue;
      DraftDistribution q;
      for (size_t i = 0; i < dist_len[e]; ++i) q.emplace_back(dist_tokens[e * cap + i], dist_probs[e * cap + i]);
      if (!draft_distribution_problem(q, tokens[e], bounds.vocab_size).empty()) continue;
      dist[j] = std::move(q);
      any_dist = true;
    }
    if (any_dist) item.draft_dist = std::move(dist);
    if (rows >= bounds.max_step_tokens) break;
  }
}

}  // namespace tokenhost
