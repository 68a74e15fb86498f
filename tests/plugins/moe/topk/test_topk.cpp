// moe.topk: gate against a float64 softmax/top-k (plain, group-limited, with a capacity per expert),
// experts against a float64 SwiGLU, rebalance against a brute-force optimum, check() on dense models and
// on groups that do not fit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "harness.hpp"
#include "moe_experts.hpp"
#include "model/quant.hpp"

namespace moe_topk_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

const ModelSpec kMoe = model_spec(4, 2, 8, 2, /*n_experts=*/8, /*n_experts_used=*/2);

// The float64 gate: ids by logit descending, lower id first on ties; weights over the chosen (normalize)
// or over all experts.
void reference_gate(const std::vector<float>& logits, uint32_t n_tokens, uint32_t n_experts, uint32_t k,
                    bool normalize, std::vector<int32_t>& ids, std::vector<double>& weights) {
  ids.assign(size_t(n_tokens) * k, -1);
  weights.assign(size_t(n_tokens) * k, 0.0);
  for (uint32_t t = 0; t < n_tokens; ++t) {
    const float* l = &logits[size_t(t) * n_experts];
    double mx = -INFINITY, all = 0, chosen = 0;
    for (uint32_t e = 0; e < n_experts; ++e) mx = std::max(mx, double(l[e]));
    std::vector<double> p(n_experts);
    for (uint32_t e = 0; e < n_experts; ++e) all += p[e] = std::exp(double(l[e]) - mx);
    std::vector<int32_t> order(n_experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    for (uint32_t j = 0; j < k; ++j) chosen += p[size_t(order[j])];
    for (uint32_t j = 0; j < k; ++j) {
      ids[size_t(t) * k + j] = order[j];
      weights[size_t(t) * k + j] = p[size_t(order[j])] / (normalize ? chosen : all);
    }
  }
}

void check_gate(std::mt19937_64& rng, bool normalize, bool integer_logits) {
  auto moe = make_plugin("moe.topk", kMoe, toml::table{{"weights", normalize ? "normalized" : "softmax"}});
  const auto& vt = moe->vtable<th_moe_vtable>();
  const uint32_t n_tokens = 40, n_experts = 8;
  int ties = 0;
  for (uint32_t k : {1u, 2u, 3u, 8u}) {
    std::vector<float> logits = random_floats(rng, size_t(n_tokens) * n_experts, 4.0f);
    if (integer_logits) {
      for (float& x : logits) x = std::floor(x / 2);  // -2 .. 1: many ties
    }
    std::vector<int32_t> ids(size_t(n_tokens) * k, -7), ref_ids;
    std::vector<float> w(size_t(n_tokens) * k, -7.0f);
    std::vector<double> ref_w;
    th_moe_gate_args a{sizeof(th_moe_gate_args), 0, n_tokens, n_experts, k, logits.data(), ids.data(), w.data()};
    th_error err;
    REQUIRE(vt.gate(moe->handle(), &a, &err) == TH_OK);
    reference_gate(logits, n_tokens, n_experts, k, normalize, ref_ids, ref_w);
    for (size_t i = 0; i < ids.size(); ++i) {
      INFO("k " << k << " token " << i / k << " slot " << i % k << " normalize " << normalize);
      REQUIRE(ids[i] == ref_ids[i]);
      REQUIRE(std::abs(double(w[i]) - ref_w[i]) <= 1e-6 * ref_w[i]);
      if (i % k > 0) ties += logits[(i / k) * n_experts + size_t(ids[i])] == logits[(i / k) * n_experts + size_t(ids[i - 1])];
    }
    if (normalize) {
      for (uint32_t t = 0; t < n_tokens; ++t) {
        REQUIRE(std::accumulate(&w[size_t(t) * k], &w[size_t(t) * k] + k, 0.0) == Approx(1.0).epsilon(1e-6));
      }
    }
  }
  if (integer_logits) CHECK(ties > 0);  // the tie-break was exercised
}

uint64_t max_load(const std::vector<uint64_t>& tokens, const std::vector<int32_t>& placement, uint32_t n_devices) {
  std::vector<uint64_t> load(n_devices, 0);
  for (size_t e = 0; e < tokens.size(); ++e) load[size_t(placement[e])] += tokens[e];
  return *std::max_element(load.begin(), load.end());
}

// The optimal makespan by trying all n_devices^n_experts placements.
uint64_t brute_force_optimum(const std::vector<uint64_t>& tokens, uint32_t n_devices) {
  std::vector<int32_t> p(tokens.size(), 0);
  uint64_t best = UINT64_MAX;
  while (true) {
    best = std::min(best, max_load(tokens, p, n_devices));
    size_t i = 0;
    while (i < p.size() && ++p[i] == int32_t(n_devices)) p[i++] = 0;
    if (i == p.size()) return best;
  }
}

}  // namespace

TEST_CASE("moe.topk gate matches a float64 softmax top-k, normalized", "[moe][topk]") {
  auto rng = fresh_rng("moe.topk gate normalize");
  check_gate(rng, true, false);
}

TEST_CASE("moe.topk gate matches a float64 softmax top-k, not normalized", "[moe][topk]") {
  auto rng = fresh_rng("moe.topk gate no normalize");
  check_gate(rng, false, false);
}

TEST_CASE("moe.topk gate breaks ties by the lower expert id", "[moe][topk]") {
  auto rng = fresh_rng("moe.topk gate ties");
  check_gate(rng, true, true);
  // A fixed case: all logits equal: experts 0..k-1, equal weights.
  auto moe = make_plugin("moe.topk", kMoe);
  std::vector<float> logits(8, 0.5f);
  std::vector<int32_t> ids(3);
  std::vector<float> w(3);
  th_moe_gate_args a{sizeof(th_moe_gate_args), 0, 1, 8, 3, logits.data(), ids.data(), w.data()};
  th_error err;
  REQUIRE(moe->vtable<th_moe_vtable>().gate(moe->handle(), &a, &err) == TH_OK);
  CHECK(ids == std::vector<int32_t>{0, 1, 2});
  for (float x : w) CHECK(x == Approx(1.0 / 3).epsilon(1e-6));
}

TEST_CASE("moe.topk experts match a float64 SwiGLU, with and without a shared expert", "[moe][topk]") {
  auto rng = fresh_rng("moe.topk experts");
  const uint32_t dim = 32, ffn = 48, n_experts = 8, k = 2, n_tokens = 7, shared_ffn = 64;
  auto moe = make_plugin("moe.topk", kMoe);
  const auto& vt = moe->vtable<th_moe_vtable>();
  std::vector<Expert> experts;
  std::vector<th_moe_expert_weights> views;
  for (uint32_t e = 0; e < n_experts; ++e) experts.emplace_back(rng, dim, ffn);
  for (const Expert& e : experts) views.push_back(e.view());
  const Expert shared(rng, dim, shared_ffn);
  const th_moe_expert_weights shared_view = shared.view();
  for (bool with_shared : {false, true}) {
    const std::vector<float> x = random_floats(rng, size_t(n_tokens) * dim, 1.0f);
    std::vector<int32_t> ids(size_t(n_tokens) * k);
    std::vector<float> w = random_floats(rng, ids.size(), 1.0f);
    for (uint32_t t = 0; t < n_tokens; ++t) {  // k distinct random experts per token
      std::vector<int32_t> all(n_experts);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      std::copy_n(all.begin(), k, &ids[size_t(t) * k]);
    }
    std::vector<float> out(size_t(n_tokens) * dim, NAN);
    th_moe_experts_args a{sizeof(th_moe_experts_args), 0, n_tokens, dim, ffn, n_experts, k, x.data(), ids.data(),
                          w.data(), views.data(), with_shared ? &shared_view : nullptr, out.data()};
    th_error err;
    REQUIRE(vt.experts(moe->handle(), &a, &err) == TH_OK);
    for (uint32_t t = 0; t < n_tokens; ++t) {
      std::vector<double> ref(dim, 0.0);
      for (uint32_t j = 0; j < k; ++j) experts[size_t(ids[t * k + j])].reference(&x[size_t(t) * dim], w[t * k + j], ref);
      if (with_shared) shared.reference(&x[size_t(t) * dim], 1.0, ref);
      double diff = 0, mag = 0;
      for (uint32_t d = 0; d < dim; ++d) {
        diff = std::max(diff, std::abs(double(out[size_t(t) * dim + d]) - ref[d]));
        mag = std::max(mag, std::abs(ref[d]));
      }
      INFO("token " << t << " shared " << with_shared << " diff " << diff << " max |ref| " << mag);
      REQUIRE(mag > 0);
      REQUIRE(diff / mag < 1e-5);
    }
  }
}

// An expert's three matrices stored as `type`; its f32 values replaced by what they dequantize to, so
// that Expert::reference is the product of the weights the kernels read.
struct StoredExpert {
  Expert values;
  th_dtype type;
  std::vector<uint8_t> gate, up, down;
  StoredExpert(std::mt19937_64& rng, uint32_t dim, uint32_t ffn, th_dtype t) : values(rng, dim, ffn), type(t) {
    store(values.gate, ffn, dim, gate);
    store(values.up, ffn, dim, up);
    store(values.down, dim, ffn, down);
  }
  void store(std::vector<float>& m, uint32_t rows, uint32_t cols, std::vector<uint8_t>& bytes) const {
    const size_t rb = quant::row_bytes(type, cols);
    bytes.resize(rb * rows);
    for (uint32_t r = 0; r < rows; ++r) {
      quant::quantize_row(type, &m[size_t(r) * cols], &bytes[r * rb], cols);
      quant::dequantize_row(type, &bytes[r * rb], &m[size_t(r) * cols], cols);
    }
  }
  th_tensor tensor(const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols) const {
    th_tensor t = Expert::tensor(values.gate, rows, cols);
    t.dtype = type;
    t.nb[0] = int64_t(quant::block_bytes(type));
    t.nb[1] = int64_t(quant::row_bytes(type, cols));
    t.nb[2] = t.nb[3] = rows * t.nb[1];
    t.data = const_cast<uint8_t*>(bytes.data());
    return t;
  }
  th_moe_expert_weights view() const {
    return {tensor(gate, values.ffn, values.dim), tensor(up, values.ffn, values.dim), tensor(down, values.dim, values.ffn)};
  }
};

TEST_CASE("moe.topk experts of every type the host's kernels take match a float64 SwiGLU of their weights", "[moe][topk]") {
  auto rng = fresh_rng("moe.topk quantized experts");
  struct Case {
    th_dtype type;
    uint32_t dim, ffn;
    double bound;  // relative to the largest output of all tokens; the integer types round activations to 8 bits per block
  };
  for (const Case& c : {Case{TH_DTYPE_F32, 64, 96, 1e-5}, Case{TH_DTYPE_F16, 64, 96, 1e-5}, Case{TH_DTYPE_BF16, 64, 96, 1e-5},
                        Case{TH_DTYPE_Q8_0, 64, 96, 2e-2}, Case{TH_DTYPE_Q4_0, 64, 96, 2e-2},
                        Case{TH_DTYPE_Q4_K, 256, 256, 2e-2}, Case{TH_DTYPE_Q6_K, 256, 256, 2e-2}}) {
    INFO(quant::dtype_name(c.type));
    const uint32_t n_experts = 6, k = 2, n_tokens = 9;
    auto moe = make_plugin("moe.topk", model_spec(4, 2, 8, 2, n_experts, k));
    std::vector<StoredExpert> experts;
    std::vector<th_moe_expert_weights> views;
    for (uint32_t e = 0; e < n_experts; ++e) experts.emplace_back(rng, c.dim, c.ffn, c.type);
    for (const StoredExpert& e : experts) views.push_back(e.view());
    const StoredExpert shared(rng, c.dim, c.ffn * 2, c.type);
    const th_moe_expert_weights shared_view = shared.view();
    const std::vector<float> x = random_floats(rng, size_t(n_tokens) * c.dim, 1.0f);
    std::vector<int32_t> ids(size_t(n_tokens) * k);
    std::vector<float> w = random_floats(rng, ids.size(), 1.0f);
    for (uint32_t t = 0; t < n_tokens; ++t) {  // expert 5 unused: its group is empty
      std::vector<int32_t> all(n_experts - 1);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      std::copy_n(all.begin(), k, &ids[size_t(t) * k]);
    }
    w[3] = 0.0f;  // a choice dropped past its expert's capacity
    for (bool with_shared : {false, true}) {
      std::vector<float> out(size_t(n_tokens) * c.dim, NAN);
      th_moe_experts_args a{sizeof(th_moe_experts_args), 0, n_tokens, c.dim, c.ffn, n_experts, k, x.data(), ids.data(),
                            w.data(), views.data(), with_shared ? &shared_view : nullptr, out.data()};
      th_error err;
      REQUIRE(moe->vtable<th_moe_vtable>().experts(moe->handle(), &a, &err) == TH_OK);
      // Errors relative to the largest output of all tokens: the integer types' error follows the
      // inputs' and weights' size, and one token's outputs may cancel to a small fraction of it (3 runs
      // in 40 drew a q8_0 token whose own largest output put its error past the bound).
      std::vector<std::vector<double>> refs(n_tokens, std::vector<double>(c.dim, 0.0));
      double mag = 0;
      for (uint32_t t = 0; t < n_tokens; ++t) {
        for (uint32_t j = 0; j < k; ++j)
          experts[size_t(ids[t * k + j])].values.reference(&x[size_t(t) * c.dim], w[t * k + j], refs[t]);
        if (with_shared) shared.values.reference(&x[size_t(t) * c.dim], 1.0, refs[t]);
        for (double r : refs[t]) mag = std::max(mag, std::abs(r));
      }
      REQUIRE(mag > 0);
      for (uint32_t t = 0; t < n_tokens; ++t) {
        double diff = 0;
        for (uint32_t d = 0; d < c.dim; ++d) diff = std::max(diff, std::abs(double(out[size_t(t) * c.dim + d]) - refs[t][d]));
        INFO("token " << t << " shared " << with_shared << " diff " << diff << " max |ref| of all tokens " << mag);
        REQUIRE(diff / mag < c.bound);
      }
    }
  }
}

TEST_CASE("moe.topk experts refuses weights the host cannot compute, naming them, and writes nothing", "[moe][topk]") {
  auto rng = fresh_rng("moe.topk experts dtype");
  auto moe = make_plugin("moe.topk", kMoe);
  const StoredExpert e(rng, 32, 32, TH_DTYPE_Q8_0);
  std::vector<float> x(32, 1.0f), w{1.0f}, out(32, 7.0f);
  std::vector<int32_t> ids{0};
  auto refused = [&](const th_moe_expert_weights& v, const std::string& message) {
    th_moe_experts_args a{sizeof(th_moe_experts_args), 0, 1, 32, 32, 1, 1, x.data(), ids.data(), w.data(), &v, nullptr,
                          out.data()};
    th_error err;
    CHECK(moe->vtable<th_moe_vtable>().experts(moe->handle(), &a, &err) == TH_ERR_INVALID_ARGUMENT);
    CHECK_THAT(err.text(), Catch::Contains(message));
    CHECK(out == std::vector<float>(32, 7.0f));
  };
  th_moe_expert_weights v = e.view();
  v.up.dtype = TH_DTYPE_Q4_0;  // mixed with q8_0
  refused(v, "grouped_matmul: weights[1] (group 0, product 1): dtype q4_0, the call's first weight's is q8_0");
  v = e.view();
  v.down.dtype = th_dtype(3);  // q4_1: not a type of the kernels
  refused(v, "grouped_matmul: weights[0] (group 0, product 0): dtype q4_1 is not one the host's kernels take");
  v = e.view();
  v.gate.ne[0] = 64;
  refused(v, "grouped_matmul: weights[0] (group 0, product 0): ne[0] = 64, not cols = 32");
  v = e.view();
  v.up.data = nullptr;
  refused(v, "expert 0 up has no data");
}

TEST_CASE("moe.topk check() refuses a dense model", "[moe][topk]") {
  auto lib = builtin_catalog().load("moe.topk");
  const ModelSpec dense = model_spec(4, 2, 16, 2, 0, 0);
  const th_model_info info = dense.to_abi();
  const th_config config{lib->manifest().defaults};  // what the host passes: the declared defaults
  const th_check_query query{sizeof(th_check_query), &info, nullptr, &config};
  th_error err;
  CHECK(lib->head().check(&query, &err) == TH_ERR_UNSUPPORTED);
  CHECK_THAT(err.text(), Catch::Contains("dense model"));
  CHECK_THROWS_AS(make_plugin("moe.topk", dense), PluginError);
  CHECK_THROWS_WITH(make_plugin("moe.topk", dense), Catch::Contains("n_experts > 0"));
  CHECK_THROWS_WITH(make_plugin("moe.topk", model_spec(4, 2, 16, 2, 8, 9)), Catch::Contains("n_experts_used (9)"));
  CHECK_NOTHROW(make_plugin("moe.topk", kMoe));
}

TEST_CASE("moe.topk group-limited gate picks its k experts from the best groups only, as a float64 reference",
          "[moe][topk]") {
  auto rng = fresh_rng("moe.topk groups");
  const uint32_t n_tokens = 40, n_experts = 8, n_groups = 4, group_size = 2;
  for (bool normalize : {true, false})
    for (uint32_t top_groups : {1u, 2u, 3u})
      for (uint32_t k : {1u, 2u}) {
        if (k > top_groups * group_size) continue;
        auto moe = make_plugin("moe.topk", kMoe, toml::table{{"weights", normalize ? "normalized" : "softmax"}, {"n_groups", int64_t(n_groups)}, {"topk_groups", int64_t(top_groups)}});
        const std::vector<float> logits = random_floats(rng, size_t(n_tokens) * n_experts, 4.0f);
        std::vector<int32_t> ids(size_t(n_tokens) * k);
        std::vector<float> w(ids.size());
        th_moe_gate_args a{sizeof(th_moe_gate_args), 0, n_tokens, n_experts, k, logits.data(), ids.data(), w.data()};
        th_error err;
        REQUIRE(moe->vtable<th_moe_vtable>().gate(moe->handle(), &a, &err) == TH_OK);
        for (uint32_t t = 0; t < n_tokens; ++t) {
          INFO("token " << t << " k " << k << " groups " << top_groups << " normalize " << normalize);
          const float* l = &logits[size_t(t) * n_experts];
          // The groups by their best logit, then the best k experts of the chosen groups.
          std::vector<double> best(n_groups, -INFINITY);
          for (uint32_t e = 0; e < n_experts; ++e) best[e / group_size] = std::max(best[e / group_size], double(l[e]));
          std::vector<uint32_t> groups(n_groups);
          std::iota(groups.begin(), groups.end(), 0u);
          std::stable_sort(groups.begin(), groups.end(), [&](uint32_t x, uint32_t y) { return best[x] > best[y]; });
          std::vector<int32_t> candidates;
          for (uint32_t e = 0; e < n_experts; ++e)
            if (std::find(groups.begin(), groups.begin() + top_groups, e / group_size) != groups.begin() + top_groups) candidates.push_back(int32_t(e));
          std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t x, int32_t y) { return l[x] > l[y]; });
          double mx = -INFINITY, all = 0, chosen = 0;
          for (uint32_t e = 0; e < n_experts; ++e) mx = std::max(mx, double(l[e]));
          for (uint32_t e = 0; e < n_experts; ++e) all += std::exp(double(l[e]) - mx);
          for (uint32_t j = 0; j < k; ++j) chosen += std::exp(double(l[candidates[j]]) - mx);
          for (uint32_t j = 0; j < k; ++j) {
            REQUIRE(ids[size_t(t) * k + j] == candidates[j]);
            const double want = std::exp(double(l[candidates[j]]) - mx) / (normalize ? chosen : all);
            REQUIRE(std::abs(double(w[size_t(t) * k + j]) - want) <= 1e-6 * want);
          }
        }
      }
}

TEST_CASE("moe.topk with a capacity drops the choices past each expert's share, earlier tokens first", "[moe][topk]") {
  auto rng = fresh_rng("moe.topk capacity");
  const uint32_t n_tokens = 40, n_experts = 8, k = 2;
  for (double factor : {0.5, 1.0, 1.25}) {
    INFO("capacity factor " << factor);
    auto moe = make_plugin("moe.topk", kMoe, toml::table{{"capacity_factor", factor}});
    std::vector<float> logits = random_floats(rng, size_t(n_tokens) * n_experts, 2.0f);
    for (uint32_t t = 0; t < n_tokens; ++t) logits[size_t(t) * n_experts] += 5.0f;  // expert 0 is every token's first choice
    std::vector<int32_t> ids(size_t(n_tokens) * k), ref_ids;
    std::vector<float> w(ids.size());
    std::vector<double> ref_w;
    th_moe_gate_args a{sizeof(th_moe_gate_args), 0, n_tokens, n_experts, k, logits.data(), ids.data(), w.data()};
    th_error err;
    REQUIRE(moe->vtable<th_moe_vtable>().gate(moe->handle(), &a, &err) == TH_OK);
    reference_gate(logits, n_tokens, n_experts, k, true, ref_ids, ref_w);
    const uint64_t capacity = uint64_t(std::ceil(factor * n_tokens * k / n_experts));
    std::vector<uint64_t> taken(n_experts, 0);
    size_t dropped = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      REQUIRE(ids[i] == ref_ids[i]);  // the choices stand; a dropped one has weight 0
      const bool drop = taken[size_t(ref_ids[i])]++ >= capacity;
      dropped += drop;
      if (drop) REQUIRE(w[i] == 0.0f);
      else REQUIRE(std::abs(double(w[i]) - ref_w[i]) <= 1e-6 * ref_w[i]);
    }
    REQUIRE(dropped >= n_tokens - capacity);  // expert 0 alone overflows
    for (uint32_t e = 0; e < n_experts; ++e) {
      size_t kept = 0;
      for (size_t i = 0; i < ids.size(); ++i) kept += ids[i] == int32_t(e) && w[i] != 0.0f;
      REQUIRE(kept <= capacity);
    }
  }
}

TEST_CASE("moe.topk check() refuses groups that do not fit the model, naming them", "[moe][topk]") {
  CHECK_THROWS_WITH(make_plugin("moe.topk", kMoe, toml::table{{"n_groups", 3}}), Catch::Contains("n_groups = 3 does not divide the model's 8 experts"));
  CHECK_THROWS_WITH(make_plugin("moe.topk", kMoe, toml::table{{"n_groups", 4}, {"topk_groups", 5}}), Catch::Contains("topk_groups = 5 is more than n_groups = 4"));
  CHECK_THROWS_WITH(make_plugin("moe.topk", model_spec(4, 2, 8, 2, 8, 3), toml::table{{"n_groups", 8}, {"topk_groups", 2}}),
                    Catch::Contains("hold fewer than the 3 experts"));
  CHECK_NOTHROW(make_plugin("moe.topk", kMoe, toml::table{{"n_groups", 4}, {"topk_groups", 1}}));
}

TEST_CASE("moe.topk rebalance (LPT) is within 4/3 of the brute-force optimum", "[moe][topk]") {
  auto rng = fresh_rng("moe.topk rebalance");
  auto moe = make_plugin("moe.topk", kMoe);
  const auto& vt = moe->vtable<th_moe_vtable>();
  REQUIRE(vt.rebalance != nullptr);
  auto run = [&](const std::vector<uint64_t>& tokens, uint32_t n_devices, std::vector<int32_t>& placement) {
    const std::vector<int32_t> before = placement;
    // No slots (as a host before 1.10 gives): moe.topk answers by device either way.
    th_moe_load load{sizeof(th_moe_load), 0, uint32_t(tokens.size()), n_devices, tokens.data(), placement.data(), 0, nullptr, nullptr};
    th_moe_placement out{sizeof(th_moe_placement), placement.data(), -1, nullptr};  // output aliases the input
    th_error err;
    REQUIRE(vt.rebalance(moe->handle(), &load, &out, &err) == TH_OK);
    for (int32_t d : placement) REQUIRE((d >= 0 && uint32_t(d) < n_devices));
    CHECK(out.changed == (placement != before ? 1 : 0));
  };
  for (int trial = 0; trial < 150; ++trial) {
    const uint32_t n_devices = trial % 2 == 0 ? 2 : 3;
    std::vector<uint64_t> tokens(6);
    const uint64_t hi = trial % 3 == 0 ? 10 : 1000;  // small ranges give ties
    for (uint64_t& t : tokens) t = std::uniform_int_distribution<uint64_t>(0, hi)(rng);
    std::vector<int32_t> placement(6);
    for (int32_t& p : placement) p = int32_t(std::uniform_int_distribution<uint32_t>(0, n_devices - 1)(rng));
    run(tokens, n_devices, placement);
    const uint64_t got = max_load(tokens, placement, n_devices), opt = brute_force_optimum(tokens, n_devices);
    INFO("trial " << trial << " devices " << n_devices << " LPT " << got << " optimum " << opt);
    REQUIRE(got >= opt);
    REQUIRE(3 * got <= 4 * opt);
    REQUIRE(3 * n_devices * got <= (4 * n_devices - 1) * opt);  // Graham's bound for LPT
    // Already balanced by LPT: a second call changes nothing.
    const std::vector<int32_t> again = placement;
    run(tokens, n_devices, placement);
    CHECK(placement == again);
  }
  // LPT's worst case for 2 devices: 7 against an optimum of 6.
  const std::vector<uint64_t> tokens{3, 3, 2, 2, 2, 0};
  std::vector<int32_t> placement(6, 0);
  run(tokens, 2, placement);
  CHECK(max_load(tokens, placement, 2) == 7);
  CHECK(brute_force_optimum(tokens, 2) == 6);
}

}  // namespace moe_topk_tests
