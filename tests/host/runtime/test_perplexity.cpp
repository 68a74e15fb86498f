// Perplexity (runtime/perplexity.hpp) on synthetic models: Generator::score's rows against the float64
// reference forward pass, llama-perplexity's chunking and the mean against plain loops over reference
// logits, and the saved distributions (runtime/logit_file.hpp) of a KL divergence run. The figures
// against llama-perplexity itself are tests/cli/perplexity.sh's.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "forward_engine.hpp"
#include "harness.hpp"
#include "reference_forward.hpp"
#include "runtime/generator.hpp"
#include "runtime/logit_file.hpp"
#include "runtime/perplexity.hpp"
#include "runtime/synthetic_model.hpp"

namespace runtime_perplexity_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

Generator make_generator(const std::shared_ptr<const ModelWeights>& w, uint32_t prefill_chunk) {
  toml::table kv;
  kv.insert("block_size", 4);
  kv.insert("n_blocks", 64);
  return Generator(w, make_plugin("attention.reference", w->spec), make_plugin("kvcache.paged", w->spec, kv), prefill_chunk);
}

double reference_nll(const ModelWeights& w, const std::vector<int32_t>& prefix, int32_t next) {
  const Vec logits = reference_forward(w, prefix).logits;
  const double best = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (double v : logits) sum += std::exp(v - best);
  return -(logits[size_t(next)] - best - std::log(sum));
}

}  // namespace

TEST_CASE("perplexity: Generator::score hands over every row from `first` on, equal to the float64 reference",
          "[perplexity][generator]") {
  auto rng = fresh_rng("perplexity score");
  ModelSpec spec = model_spec(4, 2, 8, 2);
  auto w = make_synthetic_weights(spec, rng());
  const uint32_t chunk = 1 + uint32_t(rng() % 7);  // prefill chunks cut the rows anywhere
  Generator g = make_generator(w, chunk);
  std::vector<int32_t> tokens(12 + rng() % 12);
  for (auto& t : tokens) t = int32_t(rng() % spec.info.vocab_size);
  const uint32_t first = uint32_t(rng() % tokens.size());
  INFO("prefill chunk " << chunk << ", " << tokens.size() << " tokens from " << first);
  std::vector<uint32_t> positions;
  g.score(tokens, first, [&](uint32_t p, const std::vector<float>& logits) {
    positions.push_back(p);
    const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + p + 1);
    CHECK(relative_diff(logits, reference_forward(*w, prefix).logits) < 1e-5);
  });
  std::vector<uint32_t> expected(tokens.size() - first);
  std::iota(expected.begin(), expected.end(), first);
  CHECK(positions == expected);
  CHECK_THROWS_WITH(g.score(tokens, uint32_t(tokens.size()), [](uint32_t, const std::vector<float>&) {}), Catch::Contains("scoring from position"));
  CHECK_THROWS_WITH(g.score({}, 0, [](uint32_t, const std::vector<float>&) {}), Catch::Contains("no tokens"));
}

TEST_CASE("perplexity: llama-perplexity's chunks, BOS first in each, the second half scored, against plain loops",
          "[perplexity]") {
  auto rng = fresh_rng("perplexity chunks");
  ModelSpec spec = model_spec(4, 2, 8, 2);
  auto w = make_synthetic_weights(spec, rng());
  Generator g = make_generator(w, 1 + uint32_t(rng() % 16));
  const uint32_t n_ctx = 8 + 2 * uint32_t(rng() % 5), n_chunks = 2 + uint32_t(rng() % 2);
  std::vector<int32_t> tokens(n_chunks * n_ctx + rng() % n_ctx);  // a tail shorter than a chunk: left out
  for (auto& t : tokens) t = int32_t(rng() % spec.info.vocab_size);
  const int32_t bos = 1;
  // The plain computation: chunk c is tokens [c n_ctx, (c + 1) n_ctx) with its first replaced by BOS;
  // rows n_ctx / 2 .. n_ctx - 2 predict the token after each.
  double sum = 0, sum2 = 0;
  uint64_t n = 0;
  for (uint32_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    chunk[0] = bos;
    for (uint32_t j = n_ctx / 2; j + 1 < n_ctx; ++j) {
      const double v = reference_nll(*w, std::vector<int32_t>(chunk.begin(), chunk.begin() + j + 1), chunk[j + 1]);
      sum += v, sum2 += v * v, ++n;
    }
  }
  const double ppl = std::exp(sum / double(n));
  const double err = std::sqrt((sum2 / double(n) - (sum / double(n)) * (sum / double(n))) / double(n - 1)) * ppl;

  PerplexityOptions o;
  o.n_ctx = n_ctx;
  o.bos = bos;
  std::vector<uint32_t> progress;
  const PerplexityResult r = run_perplexity(g, tokens, spec.info.vocab_size, o, [&](uint32_t done, uint32_t of, double) {
    CHECK(of == n_chunks);
    progress.push_back(done);
  });
  INFO("n_ctx " << n_ctx << ", " << n_chunks << " chunks");
  CHECK(r.n_chunks == n_chunks);
  CHECK(r.scored == n);
  CHECK(r.ppl.value == Approx(ppl).epsilon(1e-5));
  CHECK(r.ppl.error == Approx(err).epsilon(1e-3));
  CHECK(progress.size() == n_chunks);

  o.n_chunks = 1;
  CHECK(run_perplexity(g, tokens, spec.info.vocab_size, o, nullptr).scored == n / n_chunks);
  const std::vector<int32_t> short_text(2 * n_ctx - 1, 3);
  CHECK_THROWS_WITH(run_perplexity(g, short_text, spec.info.vocab_size, o, nullptr), Catch::Contains("two chunks"));
}

TEST_CASE("perplexity: KL divergence against saved distributions", "[perplexity][kl]") {
  auto rng = fresh_rng("perplexity kl");
  ModelSpec spec = model_spec(4, 2, 8, 2);
  const uint64_t seed = rng();
  auto w = make_synthetic_weights(spec, seed);
  Generator g = make_generator(w, 16);
  const uint32_t n_ctx = 16;
  std::vector<int32_t> tokens(3 * n_ctx);
  for (auto& t : tokens) t = int32_t(rng() % spec.info.vocab_size);
  PerplexityOptions o;
  o.n_ctx = n_ctx;
  const std::string path = (std::filesystem::temp_directory_path() / ("th-kl-" + std::to_string(seed) + ".bin")).string();
  const LogitFileShape shape{spec.info.vocab_size, n_ctx, 3, n_ctx / 2, n_ctx - 1 - n_ctx / 2};
  {
    LogitFileWriter writer(path, shape, tokens);
    CHECK(std::filesystem::exists(path + ".partial"));
    CHECK_FALSE(std::filesystem::exists(path));
    run_perplexity(g, tokens, spec.info.vocab_size, o, nullptr, &writer);
    writer.finish();
  }
  CHECK(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".partial"));

  SECTION("the same model: nothing moved") {
    LogitFileReader reader(path);
    const PerplexityResult r = run_perplexity(g, tokens, spec.info.vocab_size, o, nullptr, nullptr, &reader);
    REQUIRE(r.has_kl);
    CHECK(r.kl.kld.value < 1e-6);
    CHECK(r.kl.same_top.value == 1.0);
    CHECK(r.kl.ppl_base.value == Approx(r.ppl.value).epsilon(1e-4));
    CHECK(std::abs(r.kl.ln_ppl_ratio.value) < 1e-4);
  }
  SECTION("another model: KL(base || other) as plain loops compute it") {
    auto other = make_synthetic_weights(spec, seed + 1);
    Generator g2 = make_generator(other, 16);
    LogitFileReader reader(path);
    const PerplexityResult r = run_perplexity(g2, tokens, spec.info.vocab_size, o, nullptr, nullptr, &reader);
    double kl = 0;
    uint64_t n = 0;
    for (uint32_t c = 0; c < 3; ++c) {
      std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
      for (uint32_t j = n_ctx / 2; j + 1 < n_ctx; ++j) {
        const std::vector<int32_t> prefix(chunk.begin(), chunk.begin() + j + 1);
        auto lsm = [](Vec v) {
          const double best = *std::max_element(v.begin(), v.end());
          double s = 0;
          for (double x : v) s += std::exp(x - best);
          for (double& x : v) x -= best + std::log(s);
          return v;
        };
        const Vec p = lsm(reference_forward(*w, prefix).logits), q = lsm(reference_forward(*other, prefix).logits);
        for (size_t i = 0; i < p.size(); ++i) kl += std::exp(p[i]) * (p[i] - q[i]);
        ++n;
      }
    }
    CHECK(r.kl.kld.value == Approx(kl / double(n)).epsilon(2e-3));
    CHECK(r.kl.kld.value > 1e-4);
    CHECK(r.kl.kld_max >= r.kl.kld_p99);
    CHECK(r.kl.kld_p99 >= r.kl.kld_median);
  }
  SECTION("a base of another shape or text is refused by name") {
    LogitFileReader reader(path);
    PerplexityOptions other = o;
    other.n_chunks = 2;
    CHECK_THROWS_WITH(run_perplexity(g, tokens, spec.info.vocab_size, other, nullptr, nullptr, &reader), Catch::Contains("saved from 3 chunks, not 2"));
    LogitFileReader again(path);
    std::vector<int32_t> changed = tokens;
    changed[5] = (changed[5] + 1) % int32_t(spec.info.vocab_size);
    CHECK_THROWS_WITH(run_perplexity(g, changed, spec.info.vocab_size, o, nullptr, nullptr, &again), Catch::Contains("other tokens"));
  }
  SECTION("a file cut short is refused") {
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
    CHECK_THROWS_WITH(LogitFileReader(path), Catch::Contains("truncated or damaged"));
  }
  SECTION("a writer never finished leaves no file") {
    { LogitFileWriter writer(path + ".2", shape, tokens); }
    CHECK_FALSE(std::filesystem::exists(path + ".2"));
    CHECK_FALSE(std::filesystem::exists(path + ".2.partial"));
  }
  std::filesystem::remove(path);
}

}  // namespace runtime_perplexity_tests
