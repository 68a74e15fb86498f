// spec_decode.ngram: proposals against a brute-force suffix search written here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "harness.hpp"

namespace spec_decode_ngram_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

struct Ngram {
  std::shared_ptr<PluginInstance> inst;
  Ngram(int64_t min_ngram, int64_t max_ngram)
      : inst(make_plugin("spec_decode.ngram", model_spec(),
                         toml::table{{"min_ngram", min_ngram}, {"max_ngram", max_ngram}})) {}

  // Proposals for several sequences in one call; each draft is checked to be a chain.
  // bounds: each sequence's seq_max_draft (ABI 1.4), or none; older_host: the arguments end before it,
  // as a 1.3 host fills them.
  std::vector<std::vector<int32_t>> propose(const std::vector<std::vector<int32_t>>& seqs, uint32_t max_draft,
                                            const std::vector<uint32_t>* bounds = nullptr, bool older_host = false) {
    std::vector<th_spec_seq> s;
    std::vector<std::vector<int32_t>> tokens(seqs.size(), std::vector<int32_t>(max_draft + 1, -99));
    std::vector<std::vector<int32_t>> parents(seqs.size(), std::vector<int32_t>(max_draft + 1, -99));
    std::vector<th_spec_draft> drafts(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      s.push_back(th_spec_seq{i, seqs[i].data(), uint32_t(seqs[i].size())});
      drafts[i] = th_spec_draft{tokens[i].data(), parents[i].data(), 777};
    }
    th_spec_propose_args args{};
    args.struct_size = older_host ? uint32_t(TH_SIZE_THROUGH(th_spec_propose_args, drafts)) : uint32_t(sizeof args);
    args.seqs = s.data();
    args.n_seqs = uint32_t(s.size());
    args.max_draft = max_draft;
    args.drafts = drafts.data();
    args.seq_max_draft = bounds ? bounds->data() : nullptr;
    th_error err;
    REQUIRE(inst->vtable<th_spec_decode_vtable>().propose(inst->handle(), &args, &err) == TH_OK);
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const uint32_t n = drafts[i].n_draft;
      REQUIRE(n <= max_draft);
      for (uint32_t j = 0; j < n; ++j) REQUIRE(parents[i][j] == int32_t(j) - 1);  // a chain
      REQUIRE(tokens[i][max_draft] == -99);  // nothing written past max_draft
      out.emplace_back(tokens[i].begin(), tokens[i].begin() + n);
    }
    return out;
  }
};

// Brute force: for n from max_ngram down to min_ngram, every start s (latest first) of an earlier
// occurrence of the last n tokens, compared token by token; the tokens after the first hit.
std::vector<int32_t> brute_force(const std::vector<int32_t>& t, uint32_t min_ngram, uint32_t max_ngram,
                                 uint32_t max_draft) {
  const size_t len = t.size();
  for (size_t n = max_ngram; n >= min_ngram && n >= 1; --n) {
    if (n + 1 > len) continue;  // needs an earlier start s < len - n
    for (size_t s = len - n; s-- > 0;) {
      bool same = true;
      for (size_t j = 0; j < n; ++j) same = same && t[s + j] == t[len - n + j];
      if (!same) continue;
      std::vector<int32_t> out;
      for (size_t p = s + n; p < len && out.size() < max_draft; ++p) out.push_back(t[p]);
      return out;
    }
  }
  return {};
}

}  // namespace

TEST_CASE("spec_decode.ngram proposes what a brute-force search finds", "[spec_decode][ngram]") {
  auto rng = fresh_rng("spec_decode.ngram brute force");
  auto u = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  int matched = 0, empty = 0, capped = 0;
  for (const auto& [min_n, max_n] : {std::pair{1, 3}, std::pair{2, 4}, std::pair{1, 1}, std::pair{3, 8}}) {
    Ngram ngram(min_n, max_n);
    for (int trial = 0; trial < 60; ++trial) {
      const uint32_t max_draft = std::vector<uint32_t>{0, 1, 3, 5, 16}[u(0, 4)];
      std::vector<std::vector<int32_t>> seqs;
      for (int k = 0; k < 6; ++k) {
        std::vector<int32_t> t;
        const uint32_t len = u(0, 50);
        if (k % 2 == 0) {
          // Repeating: a random period, with the occasional substitution.
          std::vector<int32_t> period(u(1, 7));
          for (int32_t& x : period) x = int32_t(u(0, 20));
          for (uint32_t i = 0; i < len; ++i) t.push_back(u(0, 9) == 0 ? int32_t(u(0, 20)) : period[i % period.size()]);
        } else {
          for (uint32_t i = 0; i < len; ++i) t.push_back(int32_t(u(0, 4)));  // a small vocabulary
        }
        seqs.push_back(std::move(t));
      }
      const auto got = ngram.propose(seqs, max_draft);
      for (size_t k = 0; k < seqs.size(); ++k) {
        const auto want = brute_force(seqs[k], uint32_t(min_n), uint32_t(max_n), max_draft);
        INFO("ngram [" << min_n << ", " << max_n << "] max_draft " << max_draft << " sequence " << k << " length "
                       << seqs[k].size());
        REQUIRE(got[k] == want);
        matched += !want.empty();
        empty += want.empty();
        capped += max_draft > 0 && want.size() == max_draft;
      }
    }
  }
  INFO("matched " << matched << ", empty " << empty << ", capped at max_draft " << capped);
  CHECK(matched > 0);
  CHECK(empty > 0);
  CHECK(capped > 0);
}

TEST_CASE("spec_decode.ngram on a periodic sequence proposes its continuation", "[spec_decode][ngram]") {
  auto rng = fresh_rng("spec_decode.ngram periodic");
  Ngram ngram(1, 3);
  std::vector<int32_t> period(5);
  for (size_t i = 0; i < period.size(); ++i) period[i] = int32_t(100 + 10 * i + rng() % 10);  // distinct
  std::vector<int32_t> t;
  for (int i = 0; i < 13; ++i) t.push_back(period[i % 5]);
  // The last 3 tokens occurred 5 earlier; what followed is the period continued, cut at the end.
  const auto got = ngram.propose({t}, 4);
  REQUIRE(got[0].size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(got[0][i] == period[(13 + i) % 5]);
  CHECK(ngram.propose({t}, 16)[0].size() == 5);  // stops at the end of the sequence
}

TEST_CASE("spec_decode.ngram proposes nothing without a match", "[spec_decode][ngram]") {
  auto rng = fresh_rng("spec_decode.ngram no match");
  Ngram ngram(1, 3);
  std::vector<int32_t> distinct(30);
  for (size_t i = 0; i < distinct.size(); ++i) distinct[i] = int32_t(i * 7 + rng() % 7);
  std::shuffle(distinct.begin(), distinct.end(), rng);
  const auto got = ngram.propose({distinct, {}, {5}, {5, 6}}, 8);
  for (const auto& g : got) CHECK(g.empty());
  // min_ngram 2: a single repeated token is not enough.
  Ngram two(2, 3);
  CHECK(two.propose({{1, 2, 3, 4, 3}}, 8)[0].empty());
  CHECK(two.propose({{1, 2, 3, 4, 2, 3}}, 8)[0] == std::vector<int32_t>{4, 2, 3});
  // max_draft 0: nothing, even with a match.
  CHECK(ngram.propose({{1, 2, 1, 2}}, 0)[0].empty());
}

TEST_CASE("spec_decode.ngram keeps each sequence within its seq_max_draft and a 1.3 host's within max_draft",
          "[spec_decode][ngram]") {
  Ngram p(1, 3);
  const std::vector<int32_t> periodic = {5, 6, 7, 8, 5, 6, 7, 8, 5, 6};
  const std::vector<std::vector<int32_t>> seqs(3, periodic);
  const std::vector<uint32_t> bounds = {1, 0, 3};
  const auto out = p.propose(seqs, 4, &bounds);
  for (size_t i = 0; i < seqs.size(); ++i) {
    INFO("sequence " << i << ", bound " << bounds[i]);
    REQUIRE(out[i].size() == bounds[i]);
    for (size_t j = 0; j < out[i].size(); ++j) CHECK(out[i][j] == periodic[2 + j + 4]);  // 7, 8, 5: what followed "5 6"
  }
  // The same bounds in arguments that end before seq_max_draft: the plugin must not read them.
  for (const auto& draft : p.propose(seqs, 4, &bounds, true)) CHECK(draft.size() == 4);
}

TEST_CASE("spec_decode.ngram refuses min_ngram > max_ngram", "[spec_decode][ngram]") {
  CHECK_THROWS_WITH(Ngram(4, 2), Catch::Contains("min_ngram (4) is larger than max_ngram (2)"));
}

}  // namespace spec_decode_ngram_tests
