// constraint rules: over a fresh random vocabulary (single bytes, multi-byte words, a character split
// across two tokens, control tokens), the plugin's masks on random walks through JSON, JSON Schema and
// GBNF sources equal what the SDK's GBNF matcher says of each token's bytes, its states clone
// independently, and a source that does not parse is refused.
#include <tokenhost/gbnf.hpp>

#include <algorithm>

#include "conformance/conformance.hpp"
#include "constraint/json_schema.hpp"
#include "plugin/catalog.hpp"
#include "plugin/vocab.hpp"

namespace tokenhost::conformance {
namespace {

// Token 0 is the end of sequence and one more control token sits in the middle.
std::shared_ptr<const PluginVocab> random_vocab(Rng& rng) {
  std::vector<std::string> texts{""};
  for (int c = 0x20; c < 0x7f; ++c) texts.emplace_back(1, char(c));
  for (const char* w : {"\n", "\t", "{\"", "\":", "\",", "true", "false", "null", "  ", "\"}", "[]", "{}", "0.5", "\xc3\xa9",
                        "\xc3", "\xa9", "\xe2\x82\xac", "ab", "\": \""})
    texts.emplace_back(w);
  const std::string alphabet = "{}[]\":,0123456789abcdefxyz -.";
  for (int i = 0; i < 60; ++i) {
    std::string w;
    for (uint32_t n = uniform(rng, 2, 5); n > 0; --n) w += alphabet[uniform(rng, 0, uint32_t(alphabet.size() - 1))];
    texts.push_back(w);
  }
  texts.insert(texts.begin() + 40, "");  // a control token
  return plugin_vocab(texts, 0);
}

struct Source {
  std::string type, text, gbnf;
};

std::vector<Source> sources() {
  std::vector<Source> out;
  out.push_back({"json_object", "", constraint::json_object_gbnf()});
  const char* schemas[] = {
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "yz"]}}, "required": ["a", "b"], "additionalProperties": false})",
      R"({"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 3})",
      R"({"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": ["number", "null"]}}, "required": ["s"]})",
  };
  for (const char* s : schemas) {
    const auto schema = nlohmann::ordered_json::parse(s);
    out.push_back({"json_schema", schema.dump(), constraint::json_schema_to_gbnf(schema)});
  }
  const std::string grammar = "root ::= (\"\xc3\xa9\" | [a-c]+ | \"x\" [0-9]{1,3} | \"\xe2\x82\xac\") \"!\"?\n";
  out.push_back({"gbnf", grammar, grammar});
  return out;
}

bool allowed(const std::vector<uint32_t>& mask, size_t t) { return (mask[t / 32] >> (t % 32)) & 1u; }

// The plugin's program and states, freed through it.
struct Session {
  explicit Session(PluginInstance& instance) : p(instance) {}
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  PluginInstance& p;
  th_constraint_program* program = nullptr;
  std::vector<th_constraint_state*> states;
  ~Session() {
    for (auto* s : states) p.call(&th_constraint_vtable::free_state, "free_state", p.handle(), s);
    if (program) p.call(&th_constraint_vtable::release, "release", p.handle(), program);
  }
  th_constraint_state* start() {
    th_error err;
    th_constraint_state* s = nullptr;
    const th_status st = p.call(&th_constraint_vtable::start, "start", p.handle(), program, &s, &err);
    expect(st == TH_OK && s != nullptr, "start() returned " + std::to_string(st) + ": " + err.text());
    states.push_back(s);
    return s;
  }
  th_constraint_state* clone(th_constraint_state* from) {
    th_error err;
    th_constraint_state* s = nullptr;
    const th_status st = p.call(&th_constraint_vtable::clone, "clone", p.handle(), from, &s, &err);
    expect(st == TH_OK && s != nullptr, "clone() returned " + std::to_string(st) + ": " + err.text());
    states.push_back(s);
    return s;
  }
  th_status advance(th_constraint_state* s, int32_t token) {
    th_error err;
    return p.call(&th_constraint_vtable::advance, "advance", p.handle(), s, token, &err);
  }
  // Masks and completeness of states, in one call.
  void masks(const std::vector<th_constraint_state*>& of, uint32_t words, std::vector<std::vector<uint32_t>>& out,
             std::vector<uint8_t>& complete) {
    std::vector<uint32_t> bits(of.size() * words, 0);
    complete.assign(of.size(), 7);
    th_constraint_mask_args a{sizeof a, of.data(), uint32_t(of.size()), words, bits.data(), complete.data()};
    th_error err;
    const th_status st = p.call(&th_constraint_vtable::masks, "masks", p.handle(), &a, &err);
    expect(st == TH_OK, "masks() returned " + std::to_string(st) + ": " + err.text());
    out.clear();
    for (size_t i = 0; i < of.size(); ++i) {
      expect(complete[i] <= 1, "masks() wrote complete = " + std::to_string(complete[i]) + " (must be 0 or 1)");
      out.emplace_back(bits.begin() + long(i * words), bits.begin() + long((i + 1) * words));
    }
  }
};

// Compiles s into out's program.
void compile(Session& out, const Source& s) {
  const th_constraint_source src{sizeof(th_constraint_source), s.type.c_str(), s.text.c_str(), s.gbnf.c_str()};
  th_error err;
  const th_status st = out.p.call(&th_constraint_vtable::compile, "compile", out.p.handle(), &src, &out.program, &err);
  expect(st == TH_OK && out.program != nullptr, "compile() of a " + s.type + " source returned " + std::to_string(st) + ": " + err.text());
}

}  // namespace

void constraint_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r) {
  const auto vocab = random_vocab(rng);
  const uint32_t n = uint32_t(vocab->attrs.size()), words = (n + 31) / 32;
  ModelSpec model = model_shape(4, 2, 16, TH_DTYPE_F16);
  model.info.vocab_size = n;
  std::string why;
  auto inst = instance_for(catalog, plugin, model, why, nullptr, vocab);
  if (!inst) {
    r.not_applicable("constraint.masks_match_grammar", "check() refuses the model: " + why);
    return;
  }
  auto text = [&](size_t t) { return std::string_view(vocab->bytes).substr(vocab->offsets[t], vocab->offsets[t + 1] - vocab->offsets[t]); };
  r.rule("constraint.masks_match_grammar", [&] {
    for (const Source& source : sources()) {
      const auto grammar = std::make_shared<const sdk::Grammar>(sdk::parse_gbnf(source.gbnf));
      Session s(*inst);
      compile(s, source);
      for (uint32_t walk = 0; walk < o.rounds; ++walk) {
        th_constraint_state* state = s.start();
        sdk::GrammarMatcher ref(grammar);
        std::vector<th_constraint_state*> seen;
        std::vector<std::vector<uint32_t>> seen_masks;
        std::vector<uint8_t> seen_complete;
        for (int step = 0; step < 40; ++step) {
          const std::string where = source.type + " source, walk " + std::to_string(walk) + ", step " + std::to_string(step);
          std::vector<std::vector<uint32_t>> m;
          std::vector<uint8_t> complete;
          s.masks({state}, words, m, complete);
          expect(bool(complete[0]) == ref.complete(), where + ": complete is " + std::to_string(complete[0]) + ", the grammar says " +
                                                          std::to_string(ref.complete()));
          std::vector<int32_t> ok, refused;
          for (size_t t = 0; t < n; ++t) {
            if (vocab->attrs[t] != TH_TOKEN_TEXT) continue;
            const bool want = ref.allows(text(t));
            expect(allowed(m[0], t) == want, where + ": token " + std::to_string(t) + " (\"" + std::string(text(t)) + "\") is " +
                                                 (want ? "refused" : "allowed") + "; the grammar " + (want ? "takes" : "refuses") + " it");
            (want ? ok : refused).push_back(int32_t(t));
          }
          seen.push_back(s.clone(state));
          seen_masks.push_back(m[0]);
          seen_complete.push_back(complete[0]);
          if (!refused.empty()) {  // refused, and the state as it was
            const int32_t t = refused[uniform(rng, 0, uint32_t(refused.size() - 1))];
            expect(s.advance(state, t) != TH_OK, where + ": advance() took token " + std::to_string(t) + ", which its mask refuses");
          }
          if (ok.empty()) {
            expect(complete[0] == 1, where + ": no token allowed, and the text is not complete");
            break;
          }
          const int32_t t = ok[uniform(rng, 0, uint32_t(ok.size() - 1))];
          expect(s.advance(state, t) == TH_OK, where + ": advance() refused token " + std::to_string(t) + ", which its mask allows");
          ref.accept(text(size_t(t)));
        }
        // The states of the walk in one call: each as it was alone.
        std::vector<std::vector<uint32_t>> batched;
        std::vector<uint8_t> complete;
        s.masks(seen, words, batched, complete);
        for (size_t i = 0; i < seen.size(); ++i)
          expect(batched[i] == seen_masks[i] && complete[i] == seen_complete[i],
                 source.type + " source, walk " + std::to_string(walk) + ": state " + std::to_string(i) +
                     "'s mask in a call of " + std::to_string(seen.size()) + " differs from its mask alone");
      }
    }
  });
  r.rule("constraint.clone_independent", [&] {
    const Source source = sources().front();
    Session s(*inst);
    compile(s, source);
    th_constraint_state* a = s.start();
    std::vector<std::vector<uint32_t>> before, after;
    std::vector<uint8_t> complete;
    s.masks({a}, words, before, complete);
    th_constraint_state* b = s.clone(a);
    const int32_t open = int32_t(std::find(vocab->bytes.begin(), vocab->bytes.end(), '{') - vocab->bytes.begin());
    int32_t brace = -1;  // the token "{"
    for (size_t t = 0; t < n; ++t)
      if (text(t) == "{") brace = int32_t(t);
    expect(brace >= 0 && open >= 0, "the rules' vocabulary has no token \"{\"");
    expect(s.advance(b, brace) == TH_OK, "advance() refused \"{\" at the start of a JSON object");
    s.masks({a}, words, after, complete);
    expect(after == before, "advancing a clone changed the state it was cloned from");
    s.masks({b}, words, after, complete);
    expect(after != before, "the clone's mask did not change after \"{\"");
  });
  r.rule("constraint.bad_source_refused", [&] {
    const std::string bad = "root ::= (\"a\"";
    const th_constraint_source src{sizeof(th_constraint_source), "gbnf", bad.c_str(), bad.c_str()};
    th_constraint_program* program = nullptr;
    th_error err;
    const th_status st = inst->call(&th_constraint_vtable::compile, "compile", inst->handle(), &src, &program, &err);
    if (program != nullptr) inst->call(&th_constraint_vtable::release, "release", inst->handle(), program);
    expect(st != TH_OK, "compile() accepted a grammar with an unclosed group");
    expect(!err.messages.empty(), "compile() refused a bad grammar without a message");
  });
}

}  // namespace tokenhost::conformance
