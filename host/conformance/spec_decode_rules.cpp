// spec_decode rules: drafts stay within max_draft (and, for 1.4 plugins, each sequence's seq_max_draft), form a
// tree whose parents come first, and a distribution written beside a draft token is one that holds it;
// a proposer that drafts with a model (draft sessions, ABI 1.5) closes each sequence's session at its end.
#include <algorithm>

#include "backends/backend.hpp"
#include "conformance/conformance.hpp"
#include "plugin/catalog.hpp"
#include "speculation/draft_sessions.hpp"
#include "runtime/sampling.hpp"
#include "runtime/synthetic_model.hpp"

namespace tokenhost::conformance {
namespace {

// Draft sessions as an engine offers them to its proposer: the rules' model (synthetic weights) and any
// model named in the plugin's config resolve to it, run through attention.reference and kvcache.paged.
std::shared_ptr<DraftSessions> draft_sessions_for(const ModelSpec& model) {
  auto catalog = std::make_shared<PluginCatalog>(default_plugin_paths());
  catalog->scan();
  auto weights = make_synthetic_weights(model, 7);
  DraftSessionsInit d;
  d.engine = "conformance";
  d.model = model.name;
  d.backend = find_backend(TH_DEVICE_CPU);
  d.kv_dtype = model.info.kv_dtype;
  d.weights = [weights](const std::string&) { return weights; };
  d.make_instance = [catalog](SlotId slot, const ModelSpec& spec) {
    return instantiate(*catalog, slot == slot_of(TH_KIND_ATTENTION) ? "attention.reference" : "kvcache.paged", "conformance", spec);
  };
  return std::make_shared<DraftSessions>(std::move(d));
}

}  // namespace

void spec_decode_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r) {
  std::string why;
  const ModelSpec model = model_shape(4, 2, 16, TH_DTYPE_F16);
  auto drafts = draft_sessions_for(model);
  auto inst = instance_for(catalog, plugin, model, why, drafts);
  if (!inst) {
    r.not_applicable("spec_decode.drafts_valid", "check() refuses the model: " + why);
    return;
  }
  r.rule("spec_decode.drafts_valid", [&] {
    for (uint32_t round = 0; round < 4 * o.rounds; ++round) {
      const uint32_t n_seqs = uniform(rng, 1, 6), max_draft = uniform(rng, 1, 8);
      std::vector<std::vector<int32_t>> tokens(n_seqs), draft_tokens(n_seqs), parents(n_seqs);
      std::vector<th_spec_seq> seqs(n_seqs);
      std::vector<th_spec_draft> drafts(n_seqs);
      for (uint32_t s = 0; s < n_seqs; ++s) {
        // Repetitive text, so that proposers that look for repeats find some.
        const uint32_t period = uniform(rng, 1, 6), n = uniform(rng, 1, 60);
        for (uint32_t i = 0; i < n; ++i) tokens[s].push_back(int32_t((i % period) * 17 + s) % 256);
        draft_tokens[s].assign(max_draft + 4, -99);
        parents[s].assign(max_draft + 4, -99);
        seqs[s] = th_spec_seq{1 + s, tokens[s].data(), uint32_t(tokens[s].size())};
        drafts[s] = th_spec_draft{draft_tokens[s].data(), parents[s].data(), 0};
      }
      // ABI 1.4: each sequence's own bound (some 0), and room for draft distributions.
      std::vector<uint32_t> seq_max(n_seqs);
      for (auto& m : seq_max) m = uniform(rng, 0, max_draft);
      const uint32_t cap = 8;
      std::vector<int32_t> dist_tokens(size_t(n_seqs) * max_draft * cap, -1);
      std::vector<float> dist_probs(dist_tokens.size(), 0.0f);
      std::vector<uint32_t> dist_len(size_t(n_seqs) * max_draft, 0);
      th_spec_propose_args a{};
      a.struct_size = sizeof a;
      a.seqs = seqs.data();
      a.n_seqs = n_seqs;
      a.max_draft = max_draft;
      a.drafts = drafts.data();
      a.seq_max_draft = seq_max.data();
      a.dist_capacity = cap;
      a.dist_tokens = dist_tokens.data();
      a.dist_probs = dist_probs.data();
      a.dist_len = dist_len.data();
      const bool knows_bounds = inst->library().abi_minor() >= 4;
      th_error err;
      const th_status st = inst->call(&th_spec_decode_vtable::propose, "propose", inst->handle(), &a, &err);
      expect(st == TH_OK, "propose() returned " + std::to_string(st) + ": " + err.text());
      for (uint32_t s = 0; s < n_seqs; ++s) {
        const std::string which = "sequence " + std::to_string(s);
        expect(drafts[s].n_draft <= max_draft, which + ": " + std::to_string(drafts[s].n_draft) + " draft tokens, max_draft is " +
                                                   std::to_string(max_draft));
        if (knows_bounds)
          expect(drafts[s].n_draft <= seq_max[s], which + ": " + std::to_string(drafts[s].n_draft) +
                                                      " draft tokens, its seq_max_draft is " + std::to_string(seq_max[s]));
        for (uint32_t j = 0; j < std::min(drafts[s].n_draft, max_draft); ++j) {
          // A distribution written beside a draft token must be one, and hold the token.
          const size_t e = size_t(s) * max_draft + j;
          if (dist_len[e] == 0) continue;
          expect(dist_len[e] <= cap, which + ": draft token " + std::to_string(j) + "'s distribution has " +
                                         std::to_string(dist_len[e]) + " entries, dist_capacity is " + std::to_string(cap));
          DraftDistribution q;
          for (uint32_t k = 0; k < std::min(dist_len[e], cap); ++k) q.emplace_back(dist_tokens[e * cap + k], dist_probs[e * cap + k]);
          const std::string problem = draft_distribution_problem(q, draft_tokens[s][j], model.info.vocab_size);
          expect(problem.empty(), which + ": draft token " + std::to_string(j) + "'s distribution " + problem);
        }
        for (uint32_t i = 0; i < drafts[s].n_draft; ++i) {
          expect(parents[s][i] >= -1 && parents[s][i] < int32_t(i),
                 which + ": draft token " + std::to_string(i) + " has parent " + std::to_string(parents[s][i]) +
                     " (must be -1 or an earlier draft token)");
          expect(draft_tokens[s][i] >= 0 && uint32_t(draft_tokens[s][i]) < model.info.vocab_size,
                 which + ": draft token " + std::to_string(i) + " is " + std::to_string(draft_tokens[s][i]) +
                     ", outside the vocabulary of " + std::to_string(model.info.vocab_size));
        }
      }
      if (inst->fn(&th_spec_decode_vtable::seq_end))
        for (uint32_t s = 0; s < n_seqs; ++s) inst->call(&th_spec_decode_vtable::seq_end, "seq_end", inst->handle(), uint64_t(1 + s));
    }
  });
  const auto pools = drafts->status();
  if (pools.empty()) {
    r.not_applicable("spec_decode.draft_sessions_closed", "the plugin opened no draft session (ABI 1.5)");
    return;
  }
  r.rule("spec_decode.draft_sessions_closed", [&] {
    // Every sequence above ended (seq_end): no session of it may stay open, no KV block held.
    for (const DraftModelStatus& p : drafts->status()) {
      expect(p.sessions == 0, "draft model " + p.model + ": " + std::to_string(p.sessions) + " session(s) still open after every sequence ended");
      expect(p.blocks_used == 0, "draft model " + p.model + ": " + std::to_string(p.blocks_used) + " KV block(s) still in use after every sequence ended");
      expect(p.tokens_drafted > 0, "draft model " + p.model + ": sessions were opened but nothing was drafted");
    }
  });
}

}  // namespace tokenhost::conformance
