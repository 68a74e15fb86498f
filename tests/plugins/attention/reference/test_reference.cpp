// attention.reference against an independent float64 attention written in the tests
// (tests/support/attention_batch.hpp), over a paged KV cache filled through kvcache.paged's layout.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "attention_batch.hpp"
#include "harness.hpp"

namespace attention_reference_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Runs attention.reference on a fresh random ragged batch and returns the relative error against the
// float64 attention.
double reference_error(std::mt19937_64& rng, const HeadConfig& hc, uint32_t head_dim, uint32_t block_size,
                       th_dtype kv_dtype) {
  const ModelSpec spec = with_kv_dtype(model_spec(hc.n_heads, hc.n_kv_heads, head_dim, /*n_layers=*/2), kv_dtype);
  const FilledKv kv = fill_kv("kvcache.paged", spec, block_size, random_shapes(rng, block_size, 4), rng);
  auto attn = make_plugin("attention.reference", spec);
  const AttentionBatch batch = make_batch(kv, hc.n_heads, uniform_u32(rng, 0, 1), rng);
  std::vector<float> out = batch.new_output();
  const th_attention_batch view = batch.view(out);
  th_error err;
  REQUIRE(attn->vtable<th_attention_vtable>().forward(attn->handle(), &view, &err) == TH_OK);
  return max_relative_error(batch, out, reference_attention(batch, kv));
}

}  // namespace

TEST_CASE("attention.reference matches float64 attention: MHA, GQA, MQA, head sizes 8 to 128",
          "[attention][reference]") {
  auto rng = fresh_rng("attention.reference vs float64");
  // An f16 cache: the float64 attention is computed from the f16 values the cache holds.
  const th_dtype kv_dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  INFO("kv dtype " << quant::dtype_name(kv_dtype));
  for (const HeadConfig& hc : head_configs()) {
    for (uint32_t head_dim : head_sizes()) {
      for (uint32_t block_size : {4u, 16u}) {
        INFO(hc.name << " n_heads " << hc.n_heads << " n_kv_heads " << hc.n_kv_heads << " head_dim " << head_dim
                     << " block_size " << block_size);
        const double err = reference_error(rng, hc, head_dim, block_size, kv_dtype);
        CAPTURE(err);
        REQUIRE(err < 1e-5);
      }
    }
  }
}

TEST_CASE("attention.reference is causal: a prefill chunk's row ignores later positions", "[attention][reference]") {
  // Every row of a whole-prompt batch must equal the decode of the same prefix alone, whatever lies
  // after it: compare each row with a one-row batch whose kv_len ends at that row.
  auto rng = fresh_rng("attention.reference causality");
  const ModelSpec spec = model_spec(8, 2, 16, 1);
  const uint32_t len = uniform_u32(rng, 9, 20);
  const FilledKv kv = fill_kv("kvcache.paged", spec, 4, {{len, len}}, rng);
  auto attn = make_plugin("attention.reference", spec);
  const auto& vt = attn->vtable<th_attention_vtable>();
  const AttentionBatch full = make_batch(kv, 8, 0, rng);
  std::vector<float> out = full.new_output();
  th_attention_batch view = full.view(out);
  th_error err;
  REQUIRE(vt.forward(attn->handle(), &view, &err) == TH_OK);
  for (uint32_t row = 0; row < len; ++row) {
    AttentionBatch one = full;
    one.q.assign(full.q_row(row, 0), full.q_row(row, 0) + full.q_stride);
    one.positions = {int32_t(row)};
    one.seq_start = {0, 1};
    one.kv_len = {row + 1};
    one.n_tokens = 1;
    std::vector<float> o1 = one.new_output();
    th_attention_batch v1 = one.view(o1);
    REQUIRE(vt.forward(attn->handle(), &v1, &err) == TH_OK);
    for (uint32_t e = 0; e < 8 * 16; ++e) REQUIRE(o1[e] == out[size_t(row) * full.out_stride + e]);
  }
}

TEST_CASE("attention.reference check() refuses a kv dtype other than f32, f16 and q8_0, naming it", "[attention][reference]") {
  for (const auto& [dtype, name] : {std::pair{TH_DTYPE_Q4_0, "q4_0"}, std::pair{TH_DTYPE_BF16, "bf16"},
                                    std::pair{TH_DTYPE_Q6_K, "q6_k"}}) {
    ModelSpec spec = model_spec();
    spec.info.kv_dtype = dtype;
    auto lib = builtin_catalog().load("attention.reference");
    const th_model_info info = spec.to_abi();
    const th_device device{sizeof(th_device), TH_DEVICE_CPU, 0, "cpu", 0, 1};
    const th_config config{};
    const th_check_query query{sizeof(th_check_query), &info, &device, &config};
    th_error err;
    CHECK(lib->head().check(&query, &err) == TH_ERR_UNSUPPORTED);
    INFO(err.text());
    CHECK(contains(err.text(), std::string("kv dtype is ") + name));
    try {
      make_plugin("attention.reference", spec);
      FAIL("make_plugin accepted kv dtype " << name);
    } catch (const PluginError& e) {
      CHECK(contains(e.what(), name));
    }
  }
  // f32 is accepted.
  auto lib = builtin_catalog().load("attention.reference");
  const ModelSpec spec = model_spec();
  const th_model_info info = spec.to_abi();
  const th_config config{};
  const th_check_query query{sizeof(th_check_query), &info, nullptr, &config};
  th_error err;
  CHECK(lib->head().check(&query, &err) == TH_OK);
}

TEST_CASE("attention.reference forward() rejects a NULL q and writes nothing", "[attention][reference]") {
  auto rng = fresh_rng("attention.reference NULL q");
  const ModelSpec spec = model_spec(4, 2, 16, 2);
  const FilledKv kv = fill_kv("kvcache.paged", spec, 4, random_shapes(rng, 4, 3), rng);
  auto attn = make_plugin("attention.reference", spec);
  const AttentionBatch batch = make_batch(kv, 4, 1, rng);
  std::vector<float> out = batch.new_output();
  const std::vector<float> before = out;
  th_attention_batch view = batch.view(out);
  view.q = nullptr;
  th_error err;
  CHECK(attn->vtable<th_attention_vtable>().forward(attn->handle(), &view, &err) == TH_ERR_INVALID_ARGUMENT);
  CHECK(contains(err.text(), "NULL"));
  CHECK(out == before);
}

TEST_CASE("attention.reference forward() rejects malformed batches", "[attention][reference]") {
  auto rng = fresh_rng("attention.reference malformed");
  const ModelSpec spec = model_spec(4, 2, 8, 2);
  const FilledKv kv = fill_kv("kvcache.paged", spec, 4, random_shapes(rng, 4, 3), rng);
  auto attn = make_plugin("attention.reference", spec);
  const auto& vt = attn->vtable<th_attention_vtable>();
  AttentionBatch batch = make_batch(kv, 4, 0, rng);
  std::vector<float> out = batch.new_output();
  auto status_of = [&](auto&& mutate) {
    AttentionBatch b = batch;
    std::vector<int32_t> bad_table(64, int32_t(kv.cache.layout->n_blocks));
    mutate(b, bad_table);
    th_attention_batch view = b.view(out);
    th_error err;
    return vt.forward(attn->handle(), &view, &err);
  };
  CHECK(status_of([](AttentionBatch& b, auto&) { b.layer = 2; }) == TH_ERR_INVALID_ARGUMENT);
  CHECK(status_of([](AttentionBatch& b, auto&) { b.n_heads = 3; }) == TH_ERR_INVALID_ARGUMENT);
  CHECK(status_of([](AttentionBatch& b, auto&) { b.positions[0] = int32_t(b.kv_len[0]); }) == TH_ERR_INVALID_ARGUMENT);
  CHECK(status_of([](AttentionBatch& b, auto& t) { b.tables[0] = t.data(); }) == TH_ERR_INVALID_ARGUMENT);
  CHECK(status_of([](AttentionBatch& b, auto&) { b.q_stride = 1; }) == TH_ERR_INVALID_ARGUMENT);
  CHECK(status_of([](AttentionBatch&, auto&) {}) == TH_OK);
}

}  // namespace attention_reference_tests
