// spec_decode.suffix: proposals against a brute-force reference of the rule in its README (every
// occurrence of the pattern counted in the sequence and in the cached ended sequences), over random
// streams of proposals and ended sequences; the cache's bound; the limits of length and score.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "harness.hpp"

namespace spec_decode_suffix_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

struct Params {
  int64_t max_match = 16, max_spec = 16, max_cached_tokens = 65536;
  double spec_factor = 1.0, min_score = 0.1;
};

struct Suffix {
  std::shared_ptr<PluginInstance> inst;
  explicit Suffix(const Params& p)
      : inst(make_plugin("spec_decode.suffix", model_spec(),
                         toml::table{{"max_match", p.max_match},
                                     {"max_spec", p.max_spec},
                                     {"spec_factor", p.spec_factor},
                                     {"min_score", p.min_score},
                                     {"max_cached_tokens", p.max_cached_tokens}})) {}

  std::vector<int32_t> propose(uint64_t id, const std::vector<int32_t>& tokens, uint32_t max_draft) {
    std::vector<int32_t> out(max_draft + 1, -99), parents(max_draft + 1, -99);
    th_spec_seq s{id, tokens.data(), uint32_t(tokens.size())};
    th_spec_draft d{out.data(), parents.data(), 777};
    th_spec_propose_args args{sizeof(th_spec_propose_args), &s, 1, max_draft, &d, nullptr, 0, nullptr, nullptr, nullptr};
    th_error err;
    REQUIRE(inst->vtable<th_spec_decode_vtable>().propose(inst->handle(), &args, &err) == TH_OK);
    REQUIRE(d.n_draft <= max_draft);
    for (uint32_t j = 0; j < d.n_draft; ++j) REQUIRE(parents[j] == int32_t(j) - 1);  // a chain
    REQUIRE(out[max_draft] == -99);
    out.resize(d.n_draft);
    return out;
  }
  void end(uint64_t id) { inst->vtable<th_spec_decode_vtable>().seq_end(inst->handle(), id); }
};

// The README's rule, by brute force.
struct Reference {
  explicit Reference(const Params& params) : p(params) {}
  Params p;
  std::deque<std::vector<int32_t>> cached;
  size_t cached_tokens = 0;
  std::map<uint64_t, std::vector<int32_t>> last;

  void end(uint64_t id) {
    auto it = last.find(id);
    if (it == last.end()) return;
    std::vector<int32_t> text = it->second;
    last.erase(it);
    if (p.max_cached_tokens == 0 || text.empty()) return;
    if (text.size() > size_t(p.max_cached_tokens)) text.erase(text.begin(), text.end() - p.max_cached_tokens);
    cached_tokens += text.size();
    cached.push_back(text);
    while (cached_tokens > size_t(p.max_cached_tokens)) {
      cached_tokens -= cached.front().size();
      cached.pop_front();
    }
  }

  // How often each token follows the pattern: in the sequence, and (windows of at most max_match +
  // max_spec tokens) in the cached sequences.
  std::map<int32_t, uint64_t> followers(const std::vector<int32_t>& own, const std::vector<int32_t>& pat) const {
    std::map<int32_t, uint64_t> f;
    auto scan = [&](const std::vector<int32_t>& text) {
      for (size_t i = 0; i + pat.size() < text.size(); ++i)
        if (std::equal(pat.begin(), pat.end(), text.begin() + int64_t(i))) ++f[text[i + pat.size()]];
    };
    scan(own);
    if (int64_t(pat.size()) + 1 <= p.max_match + p.max_spec)
      for (const auto& text : cached) scan(text);
    return f;
  }

  std::vector<int32_t> propose(uint64_t id, const std::vector<int32_t>& t, uint32_t max_draft) {
    last[id] = t;
    const size_t n = t.size();
    if (n == 0 || max_draft == 0) return {};
    size_t match = 0;
    for (size_t len = std::min<size_t>(size_t(p.max_match), n); len >= 1 && match == 0; --len)
      if (!followers(t, std::vector<int32_t>(t.end() - int64_t(len), t.end())).empty()) match = len;
    if (match == 0) return {};
    const uint32_t limit = std::min({max_draft, uint32_t(p.max_spec), uint32_t(std::ceil(p.spec_factor * double(match)))});
    std::vector<int32_t> pat(t.end() - int64_t(match), t.end()), out;
    double score = 1.0;
    while (out.size() < limit) {
      const auto f = followers(t, pat);
      uint64_t total = 0, best_count = 0;
      int32_t best = 0;
      for (const auto& [tok, c] : f) {
        total += c;
        if (c > best_count) best_count = c, best = tok;
      }
      if (total == 0) break;
      const double prob = double(best_count) / double(total);
      if (score * prob < p.min_score) break;
      score *= prob;
      out.push_back(best);
      pat.push_back(best);
    }
    return out;
  }
};

}  // namespace

TEST_CASE("spec_decode.suffix proposes what a brute-force count of its rule gives, over streams of sequences",
          "[spec_decode][suffix]") {
  auto rng = fresh_rng("spec_decode.suffix brute force");
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  int matched = 0, empty = 0, from_cache_only = 0, shorter = 0;
  for (int config = 0; config < 12; ++config) {
    Params p;
    p.max_match = u(1, 6);
    p.max_spec = u(1, 8);
    p.spec_factor = std::vector<double>{0.5, 1.0, 2.0, 4.0}[u(0, 3)];
    p.min_score = std::vector<double>{0.0, 0.1, 0.4}[u(0, 2)];
    p.max_cached_tokens = std::vector<int64_t>{0, 30, 1000}[u(0, 2)];
    INFO("max_match " << p.max_match << " max_spec " << p.max_spec << " spec_factor " << p.spec_factor << " min_score "
                      << p.min_score << " max_cached_tokens " << p.max_cached_tokens);
    Suffix plugin(p);
    Reference ref(p);
    // A few live sequences that grow, propose, and end; new ones start from fragments of old ones.
    std::map<uint64_t, std::vector<int32_t>> live;
    std::vector<std::vector<int32_t>> ended;
    uint64_t next_id = 1;
    for (int event = 0; event < 120; ++event) {
      if (live.size() < 3 || u(0, 5) == 0) {
        std::vector<int32_t> t;
        if (!ended.empty() && u(0, 1) == 0) {
          const auto& src = ended[u(0, uint32_t(ended.size() - 1))];
          const uint32_t from = u(0, uint32_t(src.size())), len = u(0, 12);
          for (uint32_t i = from; i < src.size() && i < from + len; ++i) t.push_back(src[i]);
        }
        for (uint32_t i = u(0, 6); i > 0; --i) t.push_back(int32_t(u(0, 5)));
        live[next_id++] = t;
      }
      auto it = std::next(live.begin(), int64_t(u(0, uint32_t(live.size() - 1))));
      if (u(0, 7) == 0) {  // the sequence ends
        plugin.end(it->first);
        ref.end(it->first);
        ended.push_back(it->second);
        live.erase(it);
        continue;
      }
      for (uint32_t i = u(1, 3); i > 0; --i) it->second.push_back(int32_t(u(0, 5)));
      const uint32_t max_draft = std::vector<uint32_t>{0, 1, 4, 16}[u(0, 3)];
      const auto want = ref.propose(it->first, it->second, max_draft);
      INFO("sequence " << it->first << " of " << it->second.size() << " tokens, max_draft " << max_draft);
      REQUIRE(plugin.propose(it->first, it->second, max_draft) == want);
      matched += !want.empty();
      empty += want.empty();
      if (!want.empty()) {
        Reference alone(p);  // the same sequence without the cache
        from_cache_only += alone.propose(0, it->second, max_draft).empty();
      }
      shorter += !want.empty() && want.size() < max_draft && want.size() < size_t(p.max_spec);
    }
  }
  INFO("matched " << matched << ", empty " << empty << ", drafted from the cache alone " << from_cache_only
                  << ", shorter than max_draft and max_spec (score, match length, what is known) " << shorter);
  CHECK(matched > 0);
  CHECK(empty > 0);
  CHECK(from_cache_only > 0);
  CHECK(shorter > 0);
}

TEST_CASE("spec_decode.suffix drafts an ended sequence's continuation, as long as the match earns", "[spec_decode][suffix]") {
  auto rng = fresh_rng("spec_decode.suffix continuation");
  std::vector<int32_t> story(40);
  for (size_t i = 0; i < story.size(); ++i) story[i] = int32_t(1000 + i * 3 + rng() % 3);  // distinct tokens
  Params p;
  Suffix s(p);
  CHECK(s.propose(1, story, 16).empty());  // nothing repeats yet
  s.end(1);
  // A new sequence that ends with 5 tokens of the story: 5 tokens of what followed them (spec_factor 1).
  std::vector<int32_t> asks = {7, 8, 9};
  asks.insert(asks.end(), story.begin() + 10, story.begin() + 15);
  const auto got = s.propose(2, asks, 16);
  CHECK(got == std::vector<int32_t>(story.begin() + 15, story.begin() + 20));
  CHECK(s.propose(2, asks, 3).size() == 3);  // and no more than asked
  p.spec_factor = 2.0;
  Suffix twice(p);
  twice.propose(1, story, 16);
  twice.end(1);
  CHECK(twice.propose(2, asks, 16) == std::vector<int32_t>(story.begin() + 15, story.begin() + 25));
}

TEST_CASE("spec_decode.suffix stops where the continuation is too uncertain, and forgets the oldest sequences",
          "[spec_decode][suffix]") {
  Params p;
  p.min_score = 0.6;
  p.max_cached_tokens = 8;
  Suffix s(p);
  s.propose(1, {1, 2, 3, 4}, 4);
  s.end(1);
  s.propose(2, {1, 2, 5, 6}, 4);
  s.end(2);
  // After 1 2: 3 or 5, equally often (0.5 < 0.6): nothing.
  CHECK(s.propose(3, {9, 1, 2}, 4).empty());
  // After 2 5 only 6 follows (score 1), and then nothing is known.
  CHECK(s.propose(4, {2, 5}, 4) == std::vector<int32_t>{6});
  // A third ended sequence of 5 tokens: 13 cached > 8, so the two oldest are forgotten.
  s.propose(5, {7, 7, 7, 7, 7}, 1);
  s.end(5);
  CHECK(s.propose(6, {2, 5}, 4).empty());
  CHECK(s.propose(7, {7, 7}, 2) == std::vector<int32_t>{7, 7});
}

TEST_CASE("spec_decode proposers refuse NULL arrays and buffers, naming the sequence", "[spec_decode][suffix][ngram]") {
  for (const char* id : {"spec_decode.suffix", "spec_decode.ngram"}) {
    INFO(id);
    auto inst = make_plugin(id, model_spec(), toml::table{});
    const auto& vt = inst->vtable<th_spec_decode_vtable>();
    std::vector<int32_t> tokens = {1, 2, 1, 2}, out(4), parents(4);
    th_spec_seq seq{42, tokens.data(), 4};
    th_spec_draft draft{out.data(), nullptr, 0};
    th_spec_propose_args args{sizeof(th_spec_propose_args), &seq, 1, 4, &draft, nullptr, 0, nullptr, nullptr, nullptr};
    th_error err;
    CHECK(vt.propose(inst->handle(), &args, &err) == TH_ERR_INVALID_ARGUMENT);
    CHECK_THAT(err.text(), Catch::Contains(std::string(id) + ": sequence 42 has a NULL buffer"));
    th_error err2;
    CHECK(vt.propose(inst->handle(), nullptr, &err2) == TH_ERR_INVALID_ARGUMENT);
    CHECK_THAT(err2.text(), Catch::Contains("propose() got a NULL argument"));
    draft.parents = parents.data();  // and with its buffers, a proposal
    th_error err3;
    CHECK(vt.propose(inst->handle(), &args, &err3) == TH_OK);
    CHECK(draft.n_draft > 0);
  }
}

}  // namespace spec_decode_suffix_tests
