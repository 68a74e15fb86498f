// Draft sessions (th_host_api.draft_*, ABI 1.5): what a session drafts is its model's greedy continuation
// of the session's tokens (checked against the plain generation loop on fresh random tokens), however
// the tokens were appended and rolled back and however many sessions run in one batch; the cut model
// (early exit) is the model's first layers; bad arguments are refused with their reason; a full pool
// drafts for the sessions that fit; closing frees every block; a session belongs to its instance.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "backends/backend.hpp"
#include "harness.hpp"
#include "speculation/draft_sessions.hpp"
#include "runtime/generator.hpp"
#include "runtime/synthetic_model.hpp"

namespace speculation_draft_sessions_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

ModelSpec draft_spec(uint32_t vocab = 256) {
  ModelSpec m = model_spec(4, 2, 16, 3);
  m.name = "draft";
  m.info.vocab_size = vocab;
  m.info.context_len = 128;
  return m;
}

// The model cut after its first n_layers layers, made here independently of the sessions' own cut.
std::shared_ptr<const ModelWeights> first_layers(const std::shared_ptr<const ModelWeights>& w, uint32_t n_layers) {
  auto cut = std::make_shared<ModelWeights>(*w);
  cut->layers.resize(n_layers);
  cut->spec.info.n_layers = n_layers;
  return cut;
}

// The greedy continuation of `tokens` by weights, n tokens long, with the probability the model gave
// each, by the plain generation loop.
std::pair<std::vector<int32_t>, std::vector<double>> greedy_continuation(const std::shared_ptr<const ModelWeights>& w,
                                                                         const std::vector<int32_t>& tokens, uint32_t n) {
  Generator gen(w, make_plugin("attention.reference", w->spec), make_plugin("kvcache.paged", w->spec));
  std::vector<int32_t> out;
  std::vector<double> probs;
  gen.generate(
      tokens, n, -1,
      [&](const std::vector<float>& logits) {
        const int32_t best = Generator::greedy(logits);
        double sum = 0;
        for (float l : logits) sum += std::exp(double(l) - double(logits[size_t(best)]));
        probs.push_back(1.0 / sum);
        return best;
      },
      [&](int32_t t) {
        out.push_back(t);
        return true;
      });
  return {out, probs};
}

struct Pool {
  explicit Pool(std::shared_ptr<const ModelWeights> w, uint32_t n_blocks = 256,
                std::map<std::string, std::shared_ptr<const ModelWeights>> others = {})
      : weights(std::move(w)) {
    DraftSessionsInit d;
    d.engine = "test";
    d.model = weights->spec.name;
    d.backend = find_backend("cpu");
    d.kv_dtype = TH_DTYPE_F32;
    d.weights = [this, others](const std::string& m) -> std::shared_ptr<const ModelWeights> {
      if (m == weights->spec.name) return weights;
      auto it = others.find(m);
      return it == others.end() ? nullptr : it->second;
    };
    d.make_instance = [n_blocks](SlotId slot, const ModelSpec& spec) {
      if (slot == slot_of(TH_KIND_ATTENTION)) return make_plugin("attention.reference", spec);
      toml::table config{{"n_blocks", int64_t(n_blocks)}, {"block_size", int64_t(4)}};
      return make_plugin("kvcache.paged", spec, config);
    };
    sessions = std::make_shared<DraftSessions>(std::move(d));
  }
  uint64_t open(uint32_t n_layers = 0) {
    th_draft_open_args a{sizeof(th_draft_open_args), nullptr, n_layers};
    uint64_t id = 0;
    std::string why;
    REQUIRE(sessions->open(a, id, why) == TH_OK);
    return id;
  }
  void append(uint64_t s, const std::vector<int32_t>& t) {
    std::string why;
    REQUIRE(sessions->append(s, t.data(), uint32_t(t.size()), why) == TH_OK);
  }
  // Drafts n_draft[k] tokens for ids[k]; returns each session's tokens (and probabilities).
  th_status run(const std::vector<uint64_t>& ids, const std::vector<uint32_t>& n_draft, std::vector<std::vector<int32_t>>& tokens,
                std::vector<std::vector<float>>* probs = nullptr, float min_prob = 0.0f, uint32_t max_draft = 8) {
    std::vector<int32_t> t(ids.size() * max_draft, -1);
    std::vector<float> p(ids.size() * max_draft, -1.0f);
    std::vector<uint32_t> written(ids.size(), 99);
    th_draft_run_args a{};
    a.struct_size = sizeof a;
    a.n_sessions = uint32_t(ids.size());
    a.n_draft = n_draft.data();
    a.max_draft = max_draft;
    a.min_prob = min_prob;
    a.tokens = t.data();
    a.probs = p.data();
    a.n_written = written.data();
    std::string why;
    const th_status s = sessions->run(ids, a, why);
    INFO(why);
    tokens.assign(ids.size(), {});
    if (probs) probs->assign(ids.size(), {});
    if (s != TH_OK) return s;
    for (size_t k = 0; k < ids.size(); ++k) {
      REQUIRE(written[k] <= n_draft[k]);
      tokens[k].assign(t.begin() + k * max_draft, t.begin() + k * max_draft + written[k]);
      if (probs) (*probs)[k].assign(p.begin() + k * max_draft, p.begin() + k * max_draft + written[k]);
    }
    return s;
  }
  DraftModelStatus status_of(uint32_t n_layers) const {
    for (const auto& st : sessions->status())
      if (st.n_layers == n_layers) return st;
    FAIL("no draft pool of " << n_layers << " layers");
    return {};
  }
  std::shared_ptr<const ModelWeights> weights;
  std::shared_ptr<DraftSessions> sessions;
};

std::vector<int32_t> random_tokens(std::mt19937_64& rng, size_t n) {
  std::uniform_int_distribution<int32_t> token(0, 255);
  std::vector<int32_t> out(n);
  for (auto& t : out) t = token(rng);
  return out;
}

}  // namespace

TEST_CASE("draft sessions: a draft is the model's greedy continuation across appends and rollbacks and batches",
          "[draft_sessions]") {
  auto rng = fresh_rng("draft sessions");
  Pool pool(make_synthetic_weights(draft_spec(), rng()));
  for (uint32_t n_layers : {0u, 1u}) {
    INFO((n_layers == 0 ? "every layer" : "the first layer only (early exit)"));
    auto reference_weights = n_layers == 0 ? pool.weights : first_layers(pool.weights, n_layers);
    std::vector<uint64_t> ids;
    std::vector<std::vector<int32_t>> text;  // each session's tokens, as the test appended them
    for (int s = 0; s < 4; ++s) {
      ids.push_back(pool.open(n_layers));
      text.push_back(random_tokens(rng, std::uniform_int_distribution<size_t>(1, 40)(rng)));
      pool.append(ids.back(), text.back());
    }
    for (int round = 0; round < 6; ++round) {
      INFO("round " << round);
      std::vector<uint32_t> want;
      for (size_t s = 0; s < ids.size(); ++s) want.push_back(std::uniform_int_distribution<uint32_t>(0, 8)(rng));
      std::vector<std::vector<int32_t>> drafts;
      std::vector<std::vector<float>> probs;
      REQUIRE(pool.run(ids, want, drafts, &probs) == TH_OK);
      for (size_t s = 0; s < ids.size(); ++s) {
        INFO("session " << s << ", " << text[s].size() << " tokens");
        REQUIRE(drafts[s].size() == want[s]);
        const auto [expected, expected_probs] = greedy_continuation(reference_weights, text[s], want[s]);
        CHECK(drafts[s] == expected);
        for (size_t j = 0; j < probs[s].size(); ++j) CHECK(probs[s][j] == Approx(expected_probs[j]).epsilon(1e-4));
        // The target kept some of the draft and gave a token of its own; now and then a rollback.
        const size_t kept = std::uniform_int_distribution<size_t>(0, drafts[s].size())(rng);
        std::vector<int32_t> more(drafts[s].begin(), drafts[s].begin() + kept);
        more.push_back(random_tokens(rng, 1)[0]);
        if (round % 3 == 2) {
          const uint32_t keep = std::uniform_int_distribution<uint32_t>(1, uint32_t(text[s].size()))(rng);
          std::string why;
          REQUIRE(pool.sessions->rollback(ids[s], keep, why) == TH_OK);
          text[s].resize(keep);
        }
        pool.append(ids[s], more);
        text[s].insert(text[s].end(), more.begin(), more.end());
      }
    }
    for (uint64_t id : ids) pool.sessions->close(id);
    CHECK(pool.status_of(n_layers ? n_layers : 3).sessions == 0);
    CHECK(pool.status_of(n_layers ? n_layers : 3).blocks_used == 0);
  }
}

TEST_CASE("draft sessions: accepted draft tokens are not computed again", "[draft_sessions]") {
  auto rng = fresh_rng("draft sessions reuse");
  Pool pool(make_synthetic_weights(draft_spec(), rng()));
  const uint64_t id = pool.open();
  pool.append(id, random_tokens(rng, 10));
  std::vector<std::vector<int32_t>> drafts;
  REQUIRE(pool.run({id}, {5}, drafts) == TH_OK);
  REQUIRE(drafts[0].size() == 5);
  const uint64_t before = pool.status_of(3).tokens_computed;
  // Every draft token accepted, then the target's own: the first four drafted tokens' keys and values
  // are in the cache already; the fifth and the new token are fed, then one per further draft token.
  auto more = drafts[0];
  more.push_back(7);
  pool.append(id, more);
  REQUIRE(pool.run({id}, {3}, drafts) == TH_OK);
  CHECK(pool.status_of(3).tokens_computed - before == 2 + 2);
}

TEST_CASE("draft sessions: min_prob ends a draft before its first unlikely token", "[draft_sessions]") {
  auto rng = fresh_rng("draft sessions min_prob");
  Pool pool(make_synthetic_weights(draft_spec(), rng()));
  const uint64_t id = pool.open();
  pool.append(id, random_tokens(rng, 12));
  std::vector<std::vector<int32_t>> all, cut;
  std::vector<std::vector<float>> probs;
  REQUIRE(pool.run({id}, {8}, all, &probs) == TH_OK);
  REQUIRE(all[0].size() == 8);
  const float threshold = *std::max_element(probs[0].begin(), probs[0].end()) * 0.999f;
  size_t expect_len = 0;
  while (expect_len < probs[0].size() && probs[0][expect_len] >= threshold) ++expect_len;
  REQUIRE(pool.run({id}, {8}, cut, nullptr, threshold) == TH_OK);
  CHECK(cut[0] == std::vector<int32_t>(all[0].begin(), all[0].begin() + expect_len));
}

TEST_CASE("draft sessions: bad arguments are refused naming what was wrong", "[draft_sessions]") {
  auto rng = fresh_rng("draft sessions errors");
  auto small = make_synthetic_weights(draft_spec(128), 3);
  Pool pool(make_synthetic_weights(draft_spec(), rng()), 256, {{"small", small}});
  std::string why;
  uint64_t id = 0;
  th_draft_open_args unknown{sizeof(th_draft_open_args), "nope", 0};
  CHECK(pool.sessions->open(unknown, id, why) == TH_ERR_NOT_FOUND);
  CHECK_THAT(why, Catch::Matchers::Contains("nope"));
  th_draft_open_args other_vocab{sizeof(th_draft_open_args), "small", 0};
  CHECK(pool.sessions->open(other_vocab, id, why) == TH_ERR_INVALID_ARGUMENT);
  CHECK_THAT(why, Catch::Matchers::Contains("vocabulary"));
  th_draft_open_args too_deep{sizeof(th_draft_open_args), nullptr, 4};
  CHECK(pool.sessions->open(too_deep, id, why) == TH_ERR_INVALID_ARGUMENT);
  CHECK_THAT(why, Catch::Matchers::Contains("n_layers 4"));

  const uint64_t s = pool.open();
  const int32_t outside = 256;
  CHECK(pool.sessions->append(s, &outside, 1, why) == TH_ERR_INVALID_ARGUMENT);
  CHECK_THAT(why, Catch::Matchers::Contains("outside the vocabulary"));
  std::vector<std::vector<int32_t>> drafts;
  CHECK(pool.run({s}, {2}, drafts) == TH_ERR_INVALID_ARGUMENT);  // no token yet
  const auto long_text = random_tokens(rng, 128);
  CHECK(pool.sessions->append(s, long_text.data(), 128, why) == TH_ERR_RESOURCE_EXHAUSTED);
  CHECK_THAT(why, Catch::Matchers::Contains("context"));
  pool.append(s, random_tokens(rng, 5));
  CHECK(pool.sessions->rollback(s, 6, why) == TH_ERR_INVALID_ARGUMENT);
  CHECK(pool.run({s}, {9}, drafts) == TH_ERR_INVALID_ARGUMENT);       // above max_draft
  CHECK(pool.run({s, s}, {1, 1}, drafts) == TH_ERR_INVALID_ARGUMENT);  // twice
  CHECK(pool.run({s}, {1}, drafts, nullptr, 0.0f, 0) == TH_ERR_INVALID_ARGUMENT);
  CHECK(pool.run({s}, {1}, drafts, nullptr, 2.0f) == TH_ERR_INVALID_ARGUMENT);
  // Nothing refused changed the session: it drafts its model's continuation of its 5 tokens.
  REQUIRE(pool.run({s}, {2}, drafts) == TH_OK);
  CHECK(drafts[0].size() == 2);
}

TEST_CASE("draft sessions: a full pool drafts for the sessions that fit and closing frees every block", "[draft_sessions]") {
  auto rng = fresh_rng("draft sessions pool");
  Pool pool(make_synthetic_weights(draft_spec(), rng()), 6);  // 6 blocks of 4 positions
  std::vector<uint64_t> ids;
  std::vector<std::vector<int32_t>> text;
  for (int s = 0; s < 3; ++s) {
    ids.push_back(pool.open());
    text.push_back(random_tokens(rng, 9));  // 9 tokens + 3 drafted: 3 blocks each
    pool.append(ids.back(), text.back());
  }
  std::vector<std::vector<int32_t>> drafts;
  REQUIRE(pool.run(ids, {4, 4, 4}, drafts) == TH_OK);
  size_t served = 0;
  for (size_t s = 0; s < ids.size(); ++s) {
    if (drafts[s].empty()) continue;
    ++served;
    CHECK(drafts[s] == greedy_continuation(pool.weights, text[s], uint32_t(drafts[s].size())).first);
  }
  CHECK(served >= 1);
  CHECK(served < 3);
  for (uint64_t id : ids) pool.sessions->close(id);
  CHECK(pool.status_of(3).blocks_used == 0);
  // Room again: a session drafts in full.
  const uint64_t again = pool.open();
  pool.append(again, text[0]);
  REQUIRE(pool.run({again}, {4}, drafts) == TH_OK);
  CHECK(drafts[0] == greedy_continuation(pool.weights, text[0], 4).first);
}

TEST_CASE("host API: draft sessions belong to the instance that opened them", "[draft_sessions][host_api]") {
  Pool pool(make_synthetic_weights(draft_spec(), 5));
  const th_host_api* api = host_api();
  REQUIRE(TH_HAS_MEMBER(api, th_host_api, draft_close));
  auto a = std::make_unique<th_host_ctx>();
  auto b = std::make_unique<th_host_ctx>();
  th_host_ctx none;
  a->drafts = b->drafts = pool.sessions;
  th_draft_open_args args{sizeof(th_draft_open_args), nullptr, 0};
  th_draft_session* session = nullptr;
  {
    th_error err;
    CHECK(api->draft_open(&none, &args, &session, &err) == TH_ERR_UNSUPPORTED);
    CHECK(session == nullptr);
    CHECK_THAT(err.text(), Catch::Matchers::Contains("spec_decode"));
  }
  th_error err;
  REQUIRE(api->draft_open(a.get(), &args, &session, &err) == TH_OK);
  const int32_t tokens[] = {1, 2, 3};
  REQUIRE(api->draft_append(session, tokens, 3, &err) == TH_OK);
  // Another instance cannot run it; a handle the host never gave is refused without being read.
  uint32_t n_draft = 2, written = 0;
  int32_t out[4];
  th_draft_run_args run{sizeof(th_draft_run_args), 1, &session, &n_draft, 4, 0.0f, out, nullptr, &written};
  CHECK(api->draft_run(b.get(), &run, &err) == TH_ERR_INVALID_ARGUMENT);
  th_draft_session forged{a.get(), 1};
  CHECK(api->draft_append(&forged, tokens, 3, &err) == TH_ERR_INVALID_ARGUMENT);
  CHECK(api->draft_rollback(reinterpret_cast<th_draft_session*>(&written), 0, &err) == TH_ERR_INVALID_ARGUMENT);
  REQUIRE(api->draft_run(a.get(), &run, &err) == TH_OK);
  CHECK(written == 2);
  CHECK(pool.status_of(3).sessions == 1);
  CHECK(pool.status_of(3).blocks_used > 0);
  // The instance is destroyed with its session open: the host closes it and frees its blocks.
  a.reset();
  CHECK(pool.status_of(3).sessions == 0);
  CHECK(pool.status_of(3).blocks_used == 0);
  api->draft_close(session);  // a stale handle is ignored
}

}  // namespace speculation_draft_sessions_tests
