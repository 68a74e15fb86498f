// spec_decode.suffix: suffix decoding. Matches the longest suffix of a sequence (up to max_match tokens)
// against the sequence itself and a cache of the engine's recently ended sequences, then drafts the
// most frequent continuation token by token while the product of the continuations' frequencies stays
// above min_score, for at most spec_factor times the matched length: frequent, long matches earn long
// drafts, rare ones short or none. The cache is a trie of every window of the ended sequences (depth
// max_match + max_spec), bounded by max_cached_tokens, oldest sequence forgotten first. README.md says
// the exact rule.
#include <tokenhost/plugin_spec.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

struct Params {
  uint32_t max_match = 16, max_spec = 16;
  double spec_factor = 1.0, min_score = 0.1;
  uint64_t max_cached_tokens = 65536;
};

Params read_params(const th_config* config) {
  const sdk::Config cfg(config);
  Params p;
  p.max_match = uint32_t(cfg.require_int("max_match"));
  p.max_spec = uint32_t(cfg.require_int("max_spec"));
  p.spec_factor = cfg.require_double("spec_factor");
  p.min_score = cfg.require_double("min_score");
  p.max_cached_tokens = uint64_t(cfg.require_int("max_cached_tokens"));
  return p;
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, "spec_decode.suffix: check() got NULL");
    read_params(query->config);  // any model, any device: it only reads token ids
  });
}

// Every window (of up to `depth` tokens) of a set of texts: the node reached by a path counts the
// texts' occurrences of that path, so a node's children count its continuations.
class WindowTrie {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;
  explicit WindowTrie(uint32_t depth) : depth_(depth), nodes_(1) {}

  uint32_t depth() const { return depth_; }
  uint32_t child(uint32_t node, int32_t token) const {
    if (node == kNone) return kNone;
    for (const auto& [t, c] : nodes_[node].children)
      if (t == token) return c;
    return kNone;
  }
  template <class F>
  void for_each_child(uint32_t node, F&& f) const {
    for (const auto& [t, c] : nodes_[node].children) f(t, nodes_[c].count);
  }
  // delta +1 inserts the text's windows, -1 removes them (the text must have been inserted).
  void add(const std::vector<int32_t>& text, int delta) {
    std::vector<uint32_t> path;
    for (size_t i = 0; i < text.size(); ++i) {
      path.assign(1, 0);
      for (size_t j = i; j < text.size() && j - i < depth_; ++j) {
        const uint32_t next = delta > 0 ? child_or_new(path.back(), text[j]) : child(path.back(), text[j]);
        nodes_[next].count = uint32_t(int64_t(nodes_[next].count) + delta);
        path.push_back(next);
      }
      if (delta < 0) {  // deepest first: a node's count bounds its children's
        for (size_t k = path.size() - 1; k > 0; --k)
          if (nodes_[path[k]].count == 0) unlink(path[k - 1], path[k]);
      }
    }
  }

 private:
  struct Node {
    uint32_t count = 0;
    std::vector<std::pair<int32_t, uint32_t>> children;
  };
  uint32_t child_or_new(uint32_t node, int32_t token) {
    if (uint32_t c = child(node, token); c != kNone) return c;
    uint32_t c;
    if (!free_.empty()) {
      c = free_.back();
      free_.pop_back();
      nodes_[c] = Node{};
    } else {
      c = uint32_t(nodes_.size());
      nodes_.emplace_back();
    }
    nodes_[node].children.emplace_back(token, c);
    return c;
  }
  void unlink(uint32_t parent, uint32_t node) {
    auto& ch = nodes_[parent].children;
    ch.erase(std::remove_if(ch.begin(), ch.end(), [node](const auto& p) { return p.second == node; }), ch.end());
    nodes_[node].children.clear();
    nodes_[node].children.shrink_to_fit();
    free_.push_back(node);
  }
  uint32_t depth_;
  std::vector<Node> nodes_;  // [0] is the root
  std::vector<uint32_t> free_;
};

struct Suffix {
  explicit Suffix(const th_create_args& args) : params(read_params(args.config)), cache(params.max_match + params.max_spec) {}

  // The sequence ended: its tokens (as last proposed for) join the cache.
  void end(uint64_t seq_id) {
    auto it = last_tokens.find(seq_id);
    if (it == last_tokens.end()) return;
    std::vector<int32_t> text = std::move(it->second);
    last_tokens.erase(it);
    if (params.max_cached_tokens == 0 || text.empty()) return;
    if (text.size() > params.max_cached_tokens) text.erase(text.begin(), text.end() - int64_t(params.max_cached_tokens));
    cache.add(text, +1);
    cached_tokens += text.size();
    cached.push_back(std::move(text));
    while (cached_tokens > params.max_cached_tokens) {
      cache.add(cached.front(), -1);
      cached_tokens -= cached.front().size();
      cached.pop_front();
    }
  }

  uint32_t propose(const th_spec_seq& seq, uint32_t max_draft, th_spec_draft& draft);

  Params params;
  WindowTrie cache;
  std::deque<std::vector<int32_t>> cached;
  uint64_t cached_tokens = 0;
  std::unordered_map<uint64_t, std::vector<int32_t>> last_tokens;
};

uint32_t Suffix::propose(const th_spec_seq& seq, uint32_t max_draft, th_spec_draft& draft) {
  const int32_t* t = seq.tokens;
  const uint32_t n = seq.n_tokens;
  last_tokens[seq.seq_id].assign(t, t + n);
  if (n == 0 || max_draft == 0) return 0;
  const uint32_t longest = std::min(params.max_match, n);
  // m[e]: how many tokens before and at e match the sequence's last ones, for each earlier end e (a
  // match at e is followed by t[e + 1]).
  std::vector<std::pair<uint32_t, uint32_t>> ends;  // (e, m)
  for (uint32_t e = 0; e + 1 < n; ++e) {
    if (t[e] != t[n - 1]) continue;
    uint32_t m = 1;
    while (m < longest && m <= e && t[e - m] == t[n - 1 - m]) ++m;
    ends.emplace_back(e, m);
  }
  // The cache's node for each suffix length.
  std::vector<uint32_t> node(longest + 1, WindowTrie::kNone);
  for (uint32_t len = 1; len <= longest; ++len) {
    uint32_t at = 0;
    for (uint32_t k = n - len; k < n && at != WindowTrie::kNone; ++k) at = cache.child(at, t[k]);
    node[len] = at;
  }
  auto cache_followers = [&](uint32_t at, uint32_t depth) {
    uint64_t sum = 0;
    if (at != WindowTrie::kNone && depth < cache.depth()) cache.for_each_child(at, [&](int32_t, uint32_t c) { sum += c; });
    return sum;
  };
  uint32_t match = 0;
  for (uint32_t len = longest; len >= 1 && match == 0; --len) {
    uint64_t followed = cache_followers(node[len], len);
    for (const auto& [e, m] : ends) followed += m >= len;
    if (followed > 0) match = len;
  }
  if (match == 0) return 0;
  const uint32_t limit = std::min({max_draft, params.max_spec, uint32_t(std::ceil(params.spec_factor * double(match)))});
  std::vector<uint32_t> own;  // ends of the current pattern's occurrences in the sequence
  for (const auto& [e, m] : ends)
    if (m >= match) own.push_back(e);
  uint32_t at = node[match], depth = match, n_draft = 0;
  double score = 1.0;
  std::map<int32_t, uint64_t> counts;  // ordered: ties go to the smallest token id
  while (n_draft < limit) {
    counts.clear();
    for (uint32_t e : own)
      if (e + 1 < n) ++counts[t[e + 1]];
    if (at != WindowTrie::kNone && depth < cache.depth()) cache.for_each_child(at, [&](int32_t tok, uint32_t c) { counts[tok] += c; });
    uint64_t total = 0, best_count = 0;
    int32_t best = 0;
    for (const auto& [tok, c] : counts) {
      total += c;
      if (c > best_count) best_count = c, best = tok;
    }
    if (total == 0) break;
    const double p = double(best_count) / double(total);
    if (score * p < params.min_score) break;
    score *= p;
    draft.tokens[n_draft] = best;
    draft.parents[n_draft] = int32_t(n_draft) - 1;
    ++n_draft;
    std::vector<uint32_t> next;
    for (uint32_t e : own)
      if (e + 1 < n && t[e + 1] == best) next.push_back(e + 1);
    own.swap(next);
    at = cache.child(at, best);
    ++depth;
  }
  return n_draft;
}

th_status propose(th_instance* instance, const th_spec_propose_args* args, th_error* err) {
  return sdk::guard(err, [&] {
    sdk::check_propose_args("spec_decode.suffix", args);
    auto& self = sdk::self<Suffix>(instance);
    for (uint32_t s = 0; s < args->n_seqs; ++s) {
      const th_spec_seq& seq = args->seqs[s];
      th_spec_draft& draft = args->drafts[s];
      draft.n_draft = self.propose(seq, sdk::seq_max_draft(args, s), draft);
    }
  });
}

void seq_end(th_instance* instance, uint64_t seq_id) {
  try {
    sdk::self<Suffix>(instance).end(seq_id);
  } catch (...) {  // out of memory while caching: the cache simply misses this sequence
  }
}

const th_spec_decode_vtable kVtable = {
    sizeof(th_spec_decode_vtable),
    sdk::create_instance<Suffix>,
    sdk::destroy_instance<Suffix>,
    check,
    propose,
    nullptr,  // accepted: the draft's length follows match length and frequency, not acceptance
    seq_end,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_SPEC_DECODE,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
