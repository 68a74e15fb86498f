// constraint.gbnf: structured output through GBNF (th_constraint.h). Every constraint the host sends
// comes with its GBNF (th_constraint_source.gbnf), compiled with the SDK's grammar (tokenhost/gbnf.hpp);
// a state is a grammar matcher. Masks walk a byte trie of the vocabulary, built once per instance: a
// matcher is copied down each edge the grammar allows, so a prefix shared by many tokens is matched
// once, and a subtree the grammar refuses is never entered.
#include <tokenhost/gbnf.hpp>
#include <tokenhost/plugin.hpp>

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <string>
#include <vector>

// A compiled grammar and the masks already computed for it, by matcher state: the text of a JSON
// string, a number or the whitespace between members leaves the matcher where it was, so most steps of
// a sequence, and of every other sequence of the source, find their mask here.
struct th_constraint_program {
  std::shared_ptr<const tokenhost::sdk::Grammar> grammar;
  struct Mask {
    std::vector<uint32_t> words;
    uint8_t complete = 0;
  };
  std::unordered_map<std::string, Mask> masks;
  size_t max_masks = 0;  // past it the cache starts again (a bound on its memory: about 16 MiB)
};

struct th_constraint_state {
  tokenhost::sdk::GrammarMatcher matcher;
  th_constraint_program* program;
};

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

constexpr const char* kId = "constraint.gbnf";

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": check() got NULL");
  });
}

// The vocabulary's text tokens as a trie of their bytes: node 0 is the root.
struct Trie {
  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> children;  // byte, node
    std::vector<int32_t> tokens;                        // the tokens whose bytes end here
  };
  std::vector<Node> nodes{1};

  void insert(const uint8_t* bytes, size_t n, int32_t token) {
    uint32_t at = 0;
    for (size_t i = 0; i < n; ++i) {
      uint32_t next = 0;
      for (const auto& [b, child] : nodes[at].children)
        if (b == bytes[i]) next = child;
      if (next == 0) {
        next = uint32_t(nodes.size());
        nodes[at].children.emplace_back(bytes[i], next);
        nodes.emplace_back();
      }
      at = next;
    }
    nodes[at].tokens.push_back(token);
  }
};

struct Gbnf {
  explicit Gbnf(const th_create_args& args) {
    if (!TH_HAS_MEMBER(&args, th_create_args, vocab) || args.vocab == nullptr)
      return;  // a model without a vocabulary: compile() refuses, naming why
    const th_vocab& v = *args.vocab;
    n_tokens = v.n_tokens;
    tokens.resize(n_tokens);
    for (uint32_t t = 0; t < n_tokens; ++t) {
      if (v.attrs[t] != TH_TOKEN_TEXT || v.offsets[t + 1] <= v.offsets[t]) continue;
      const uint8_t* b = v.bytes + v.offsets[t];
      const size_t n = v.offsets[t + 1] - v.offsets[t];
      tokens[t].assign(reinterpret_cast<const char*>(b), n);
      trie.insert(b, n, int32_t(t));
    }
  }

  // Sets the bits of every token below `node` that the matcher can take.
  void walk(uint32_t node, const sdk::GrammarMatcher& m, uint32_t* mask) const {
    for (const auto& [byte, child] : trie.nodes[node].children) {
      sdk::GrammarMatcher next = m;
      if (!next.accept_byte(byte)) continue;
      for (int32_t t : trie.nodes[child].tokens) mask[t / 32] |= 1u << (t % 32);
      if (!trie.nodes[child].children.empty()) walk(child, next, mask);
    }
  }

  uint32_t n_tokens = 0;
  std::vector<std::string> tokens;  // each token's bytes ("" for control tokens)
  Trie trie;
};

th_status compile(th_instance* instance, const th_constraint_source* source, th_constraint_program** out, th_error* err) {
  return sdk::guard(err, [&] {
    *out = nullptr;
    const Gbnf& self = sdk::self<Gbnf>(instance);
    if (self.n_tokens == 0) throw Error(TH_ERR_UNSUPPORTED, std::string(kId) + ": the engine's model has no vocabulary to constrain");
    if (source == nullptr || source->gbnf == nullptr)
      throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": compile() needs the source's GBNF");
    try {
      *out = new th_constraint_program{std::make_shared<const sdk::Grammar>(sdk::parse_gbnf(source->gbnf)), {}, 0};
      (*out)->max_masks = std::max<size_t>(64, (size_t(16) << 20) / (4 * ((self.n_tokens + 31) / 32)));
    } catch (const std::invalid_argument& e) {
      throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": " + e.what());
    }
  });
}

void release(th_instance*, th_constraint_program* program) { delete program; }

th_status start(th_instance*, th_constraint_program* program, th_constraint_state** out, th_error* err) {
  return sdk::guard(err, [&] { *out = new th_constraint_state{sdk::GrammarMatcher(program->grammar), program}; });
}

th_status clone(th_instance*, const th_constraint_state* state, th_constraint_state** out, th_error* err) {
  return sdk::guard(err, [&] { *out = new th_constraint_state{*state}; });
}

void free_state(th_instance*, th_constraint_state* state) { delete state; }

th_status advance(th_instance* instance, th_constraint_state* state, int32_t token, th_error* err) {
  return sdk::guard(err, [&] {
    const Gbnf& self = sdk::self<Gbnf>(instance);
    if (token < 0 || uint32_t(token) >= self.n_tokens || self.tokens[size_t(token)].empty())
      throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": token " + std::to_string(token) + " is not a text token");
    if (!state->matcher.accept(self.tokens[size_t(token)]))
      throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": token " + std::to_string(token) + " is not allowed here");
  });
}

th_status masks(th_instance* instance, const th_constraint_mask_args* args, th_error* err) {
  return sdk::guard(err, [&] {
    const Gbnf& self = sdk::self<Gbnf>(instance);
    if (args == nullptr || (args->n_states > 0 && (args->states == nullptr || args->masks == nullptr || args->complete == nullptr)))
      throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": masks() got a NULL argument");
    if (args->words_per_mask < (self.n_tokens + 31) / 32)
      throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": words_per_mask " + std::to_string(args->words_per_mask) +
                                               " is too small for " + std::to_string(self.n_tokens) + " tokens");
    const size_t words = (self.n_tokens + 31) / 32;
    for (uint32_t i = 0; i < args->n_states; ++i) {
      const th_constraint_state& st = *args->states[i];
      uint32_t* out = args->masks + size_t(i) * args->words_per_mask;
      std::string key = st.matcher.state_key();
      th_constraint_program& program = *st.program;
      auto hit = program.masks.find(key);
      if (hit == program.masks.end()) {
        th_constraint_program::Mask m;
        m.words.assign(words, 0);
        m.complete = st.matcher.complete() ? 1 : 0;
        self.walk(0, st.matcher, m.words.data());
        if (program.masks.size() >= program.max_masks) program.masks.clear();
        hit = program.masks.emplace(std::move(key), std::move(m)).first;
      }
      std::copy(hit->second.words.begin(), hit->second.words.end(), out);
      args->complete[i] = hit->second.complete;
    }
  });
}

const th_constraint_vtable kVtable = {
    sizeof(th_constraint_vtable),
    sdk::create_instance<Gbnf>,
    sdk::destroy_instance<Gbnf>,
    check,
    compile,
    release,
    start,
    clone,
    free_state,
    advance,
    masks,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_CONSTRAINT,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
