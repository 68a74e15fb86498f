// spec_decode.ngram: prompt-lookup decoding. Finds the latest earlier occurrence of the sequence's
// last n tokens (longest n first) and proposes the tokens that followed it, as a chain. Stateless.
#include <tokenhost/plugin_spec.hpp>

#include <algorithm>
#include <string>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

struct NgramRange {
  uint32_t min_ngram;
  uint32_t max_ngram;
};

NgramRange read_range(const th_config* config) {
  const sdk::Config cfg(config);
  NgramRange r{};
  r.max_ngram = uint32_t(cfg.require_int("max_ngram"));
  r.min_ngram = uint32_t(cfg.require_int("min_ngram"));
  if (r.min_ngram > r.max_ngram) {
    throw Error(TH_ERR_INVALID_ARGUMENT, "spec_decode.ngram: min_ngram (" + std::to_string(r.min_ngram) +
                                             ") is larger than max_ngram (" + std::to_string(r.max_ngram) + ")");
  }
  return r;
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "spec_decode.ngram: check() got NULL");
    read_range(query->config);  // any model, any device: it only reads token ids
  });
}

struct Ngram {
  explicit Ngram(const th_create_args& args) : range(read_range(args.config)) {}
  NgramRange range;
};

// Start of the latest match of the last n tokens strictly before the suffix itself, or -1.
int64_t find_earlier(const int32_t* tokens, uint32_t n_tokens, uint32_t n) {
  const int32_t* suffix = tokens + (n_tokens - n);
  for (int64_t start = int64_t(n_tokens) - n - 1; start >= 0; --start) {
    if (std::equal(suffix, suffix + n, tokens + start)) return start;
  }
  return -1;
}

void propose_one(const NgramRange& range, const th_spec_seq& seq, uint32_t max_draft, th_spec_draft& draft) {
  draft.n_draft = 0;
  if (max_draft == 0 || seq.n_tokens < 2) return;
  const uint32_t longest = std::min(range.max_ngram, seq.n_tokens - 1);
  for (uint32_t n = longest; n >= range.min_ngram && n > 0; --n) {
    const int64_t start = find_earlier(seq.tokens, seq.n_tokens, n);
    if (start < 0) continue;
    const uint32_t from = uint32_t(start) + n;  // first token after the match, < n_tokens
    const uint32_t count = std::min(max_draft, seq.n_tokens - from);
    for (uint32_t i = 0; i < count; ++i) {
      draft.tokens[i] = seq.tokens[from + i];
      draft.parents[i] = int32_t(i) - 1;
    }
    draft.n_draft = count;
    return;
  }
}

th_status propose(th_instance* instance, const th_spec_propose_args* args, th_error* err) {
  return sdk::guard(err, [&] {
    sdk::check_propose_args("spec_decode.ngram", args);
    const NgramRange& range = sdk::self<Ngram>(instance).range;
    for (uint32_t s = 0; s < args->n_seqs; ++s) {
      const th_spec_seq& seq = args->seqs[s];
      th_spec_draft& draft = args->drafts[s];
      propose_one(range, seq, sdk::seq_max_draft(args, s), draft);
    }
  });
}

const th_spec_decode_vtable kVtable = {
    sizeof(th_spec_decode_vtable),
    sdk::create_instance<Ngram>,
    sdk::destroy_instance<Ngram>,
    check,
    propose,
    nullptr,  // accepted: stateless
    nullptr,  // seq_end: stateless
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_SPEC_DECODE,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
