// attention.cpu_flash against attention.reference and the float64 attention of the tests
// (tests/support/attention_batch.hpp): thread counts agree with each other, long contexts, ragged
// batches of prefill chunks and decodes, every kernel level, and the reference's refusals and messages.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "attention_batch.hpp"
#include "harness.hpp"

namespace attention_cpu_flash_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::shared_ptr<PluginInstance> flash(const ModelSpec& spec, int64_t threads) {
  return make_plugin("attention.cpu_flash", spec, toml::table{{"threads", threads}});
}

std::vector<float> run(PluginInstance& attn, const AttentionBatch& batch) {
  std::vector<float> out = batch.new_output();
  const th_attention_batch view = batch.view(out);
  th_error err;
  const th_status s = attn.vtable<th_attention_vtable>().forward(attn.handle(), &view, &err);
  INFO(attn.id() << " forward: " << err.text());
  REQUIRE(s == TH_OK);
  return out;
}

// Multiply-adds of a batch (q . k and p * v), to make sure a case takes the threaded path.
double work(const AttentionBatch& b) {
  double w = 0;
  for (int32_t p : b.positions) w += 2.0 * (p + 1) * b.n_heads * b.head_dim;
  return w;
}

// cpu_flash with threads 1, 2 and 4 and the reference on one batch: the thread counts agree bit for bit
// (their items split the rows differently), and all of them with the reference and the float64
// attention within 1e-5.
void compare_all(const ModelSpec& spec, const FilledKv& kv, const AttentionBatch& batch) {
  auto reference = make_plugin("attention.reference", spec);
  const std::vector<double> ref = packed(batch, run(*reference, batch));
  CHECK(max_relative_error(batch, run(*reference, batch), reference_attention(batch, kv)) < 1e-5);
  const std::vector<float> one = run(*flash(spec, 1), batch);
  const std::vector<double> one_packed = packed(batch, one);
  double err_ref = max_relative_error(batch, one, ref);
  CAPTURE(err_ref);
  CHECK(err_ref < 1e-5);
  CHECK(max_relative_error(batch, one, reference_attention(batch, kv)) < 1e-5);
  for (int64_t threads : {2, 4}) {
    const std::vector<float> got = run(*flash(spec, threads), batch);
    INFO("threads " << threads << ", largest relative difference " << max_relative_error(batch, got, one_packed));
    CHECK(got == one);
    CHECK(max_relative_error(batch, got, ref) < 1e-5);
  }
}

}  // namespace

TEST_CASE("attention.cpu_flash: threads 1, 2 and 4 agree, and match the reference", "[attention][cpu_flash]") {
  auto rng = fresh_rng("attention.cpu_flash threads");
  const th_dtype kv_dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  INFO("kv dtype " << quant::dtype_name(kv_dtype));
  for (const HeadConfig& hc : head_configs()) {
    for (uint32_t head_dim : {16u, 64u}) {
      const uint32_t block_size = 16;
      const ModelSpec spec = with_kv_dtype(model_spec(hc.n_heads, hc.n_kv_heads, head_dim, 2), kv_dtype);
      const FilledKv kv = fill_kv("kvcache.paged", spec, block_size, random_shapes(rng, block_size, 12, 4), rng);
      const AttentionBatch batch = make_batch(kv, hc.n_heads, uniform_u32(rng, 0, 1), rng);
      INFO(hc.name << " n_heads " << hc.n_heads << " n_kv_heads " << hc.n_kv_heads << " head_dim " << head_dim
                   << " n_tokens " << batch.n_tokens << " work " << work(batch));
      REQUIRE(work(batch) >= 64 * 1024);  // large enough to be split across threads
      compare_all(spec, kv, batch);
    }
  }
}

TEST_CASE("attention.cpu_flash: a row's output is the same in a prefill chunk as alone, bit for bit",
          "[attention][cpu_flash]") {
  // A chunk's rows are items of many rows (chunked by the thread count), alone each is an item of one.
  auto rng = fresh_rng("attention.cpu_flash rows alone");
  const th_dtype kv_dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  INFO("kv dtype " << quant::dtype_name(kv_dtype));
  for (const HeadConfig& hc : head_configs()) {
    const ModelSpec spec = with_kv_dtype(model_spec(hc.n_heads, hc.n_kv_heads, 64, 1), kv_dtype);
    const FilledKv kv = fill_kv("kvcache.paged", spec, 16, random_shapes(rng, 16, 6, 3), rng);
    const AttentionBatch batch = make_batch(kv, hc.n_heads, 0, rng);
    AttentionBatch alone = batch;  // every row its own sequence, over its sequence's table
    alone.seq_start = {0};
    alone.kv_len.clear();
    alone.tables.clear();
    for (size_t seq = 0; seq + 1 < batch.seq_start.size(); ++seq)
      for (uint32_t i = batch.seq_start[seq]; i < batch.seq_start[seq + 1]; ++i) {
        alone.seq_start.push_back(i + 1);
        alone.kv_len.push_back(uint32_t(batch.positions[i]) + 1);
        alone.tables.push_back(batch.tables[seq]);
      }
    INFO(hc.name << " " << hc.n_heads << "/" << hc.n_kv_heads);
    auto attn = flash(spec, 1);
    CHECK(run(*attn, batch) == run(*attn, alone));
  }
}

TEST_CASE("attention.cpu_flash: long contexts (2000 positions, blocks of 16, GQA 8/2) match the reference",
          "[attention][cpu_flash]") {
  auto rng = fresh_rng("attention.cpu_flash long context");
  const th_dtype kv_dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  INFO("kv dtype " << quant::dtype_name(kv_dtype));
  for (uint32_t head_dim : {64u, 128u}) {
    INFO("head_dim " << head_dim);
    const ModelSpec spec = with_kv_dtype(model_spec(8, 2, head_dim, 1), kv_dtype);
    // Decodes at the end of 2000 and 1999 positions, and a prefill chunk of 48 rows ending at 2000.
    const FilledKv kv = fill_kv("kvcache.paged", spec, 16, {{2000, 1}, {2000, 48}, {1999, 1}}, rng);
    REQUIRE(kv.tables_out_of_order);
    const AttentionBatch batch = make_batch(kv, 8, 0, rng);
    compare_all(spec, kv, batch);
  }
}

TEST_CASE("attention.cpu_flash: one decode row, its kv heads shared out among the threads, and 64 decodes at once",
          "[attention][cpu_flash]") {
  // A decode's item takes its sequence's kv heads together, or a share of them when there are fewer
  // such sequences than threads: threads 1, 2 and 4 give one, two and four items for the single row.
  auto rng = fresh_rng("attention.cpu_flash decode items");
  const th_dtype kv_dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  INFO("kv dtype " << quant::dtype_name(kv_dtype));
  for (const HeadConfig& hc : head_configs()) {
    const ModelSpec spec = with_kv_dtype(model_spec(hc.n_heads, hc.n_kv_heads, 64, 2), kv_dtype);
    INFO(hc.name << " n_heads " << hc.n_heads << " n_kv_heads " << hc.n_kv_heads);
    const FilledKv one = fill_kv("kvcache.paged", spec, 16, {{uniform_u32(rng, 200, 400), 1}}, rng);
    compare_all(spec, one, make_batch(one, hc.n_heads, 1, rng));
    const FilledKv many = fill_kv("kvcache.paged", spec, 16, std::vector<SeqRows>(64, SeqRows{uniform_u32(rng, 20, 60), 1}), rng);
    compare_all(spec, many, make_batch(many, hc.n_heads, 1, rng));
  }
}

TEST_CASE("attention.cpu_flash: a ragged batch of prefill chunks and decodes, odd head sizes",
          "[attention][cpu_flash]") {
  auto rng = fresh_rng("attention.cpu_flash ragged");
  const th_dtype kv_dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  INFO("kv dtype " << quant::dtype_name(kv_dtype));
  // Head sizes that are not a multiple of 8 or 32 take the kernels' tails.
  for (uint32_t head_dim : {12u, 40u, 128u}) {
    for (const HeadConfig& hc : head_configs()) {
      INFO(hc.name << " n_heads " << hc.n_heads << " n_kv_heads " << hc.n_kv_heads << " head_dim " << head_dim);
      const ModelSpec spec = with_kv_dtype(model_spec(hc.n_heads, hc.n_kv_heads, head_dim, 2), kv_dtype);
      const std::vector<SeqRows> shapes = {{300, 1}, {37, 37}, {150, 40}, {1, 1},  {64, 1},
                                           {260, 100}, {33, 1}, {16, 16}, {17, 2}, {129, 1}};
      const FilledKv kv = fill_kv("kvcache.paged", spec, uniform_u32(rng, 0, 1) == 0 ? 4 : 16, shapes, rng);
      const AttentionBatch batch = make_batch(kv, hc.n_heads, 1, rng);
      compare_all(spec, kv, batch);
    }
  }
}

TEST_CASE("attention.cpu_flash: every kernel level this CPU runs matches the reference", "[attention][cpu_flash]") {
  auto rng = fresh_rng("attention.cpu_flash kernels");
  const th_dtype kv_dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  INFO("kv dtype " << quant::dtype_name(kv_dtype));
  // Head sizes that the vector width divides and one (72) that leaves a tail; blocks of 16 positions and
  // of 4; prefill chunks beside decodes.
  for (uint32_t head_dim : {16u, 64u, 72u, 128u}) {
    const ModelSpec spec = with_kv_dtype(model_spec(8, 2, head_dim, 1), kv_dtype);
    for (uint32_t block : {4u, 16u}) {
      const FilledKv kv = fill_kv("kvcache.paged", spec, block, random_shapes(rng, 16, 10, 3), rng);
      const AttentionBatch batch = make_batch(kv, 8, 0, rng);
      const std::vector<double> ref = reference_attention(batch, kv);
      size_t levels = 0;
      for (const char* level : {"portable", "avx2"}) {
        std::shared_ptr<PluginInstance> attn;
        try {
          attn = make_plugin("attention.cpu_flash", spec, toml::table{{"kernels", level}, {"threads", 2}});
        } catch (const PluginError& e) {
          CHECK(contains(e.what(), std::string("'kernels' = '") + level + "'"));  // this CPU lacks it
          continue;
        }
        INFO(level << " kernels, head size " << head_dim << ", blocks of " << block);
        CHECK(max_relative_error(batch, run(*attn, batch), ref) < 1e-5);
        ++levels;
      }
      CHECK(levels >= 1);  // the portable level runs everywhere
    }
  }
  CHECK_THROWS_WITH(make_plugin("attention.cpu_flash", model_spec(), toml::table{{"kernels", "sse9"}}),
                    Catch::Matchers::Contains("'kernels' = 'sse9' is not one of auto, avx2, portable"));
}

TEST_CASE("attention.cpu_flash: check() refuses what the reference refuses, and a bad thread count",
          "[attention][cpu_flash]") {
  auto lib = builtin_catalog().load("attention.cpu_flash");
  const th_config config{lib->manifest().defaults};  // what the host passes: the declared defaults
  for (const auto& [dtype, name] : {std::pair{TH_DTYPE_BF16, "bf16"}, std::pair{TH_DTYPE_Q4_0, "q4_0"}}) {
    ModelSpec spec = model_spec();
    spec.info.kv_dtype = dtype;
    const th_model_info info = spec.to_abi();
    const th_device device{sizeof(th_device), TH_DEVICE_CPU, 0, "cpu", 0, 1};
    const th_check_query query{sizeof(th_check_query), &info, &device, &config};
    th_error err;
    CHECK(lib->head().check(&query, &err) == TH_ERR_UNSUPPORTED);
    INFO(err.text());
    CHECK(contains(err.text(),
                   std::string("attention.cpu_flash: supports kv dtype f32, f16, q8_0 only, the model's kv dtype is ") + name));
  }
  {
    const ModelSpec spec = model_spec();
    const th_model_info info = spec.to_abi();
    const th_device gpu{sizeof(th_device), TH_DEVICE_CUDA, 0, "cuda:0", 0, 0};
    const th_check_query query{sizeof(th_check_query), &info, &gpu, &config};
    th_error err;
    CHECK(lib->head().check(&query, &err) == TH_ERR_UNSUPPORTED);
    CHECK(contains(err.text(), "runs on the CPU only"));
    const th_check_query cpu_query{sizeof(th_check_query), &info, nullptr, &config};
    th_error ok;
    CHECK(lib->head().check(&cpu_query, &ok) == TH_OK);
  }
  for (int64_t threads : {-1, 257}) {
    INFO("threads " << threads);
    try {
      flash(model_spec(), threads);
      FAIL("threads " << threads << " was accepted");
    } catch (const PluginError& e) {
      CHECK(contains(e.what(), "threads"));
    }
  }
  CHECK(flash(model_spec(), 0) != nullptr);  // 0: hardware_concurrency()
}

TEST_CASE("attention.cpu_flash: malformed batches are refused with the reference's messages, output untouched",
          "[attention][cpu_flash]") {
  auto rng = fresh_rng("attention.cpu_flash malformed");
  const ModelSpec spec = model_spec(4, 2, 8, 2);
  const FilledKv kv = fill_kv("kvcache.paged", spec, 4, random_shapes(rng, 4, 3), rng);
  auto reference = make_plugin("attention.reference", spec);
  auto attn = flash(spec, 2);
  const AttentionBatch batch = make_batch(kv, 4, 0, rng);
  std::vector<int32_t> bad_table(64, int32_t(kv.cache.layout->n_blocks));
  std::vector<uint32_t> bad_start;
  auto message_of = [&](PluginInstance& p, const std::string& prefix, auto&& mutate) {
    AttentionBatch b = batch;
    std::vector<float> out = b.new_output();
    const std::vector<float> before = out;
    th_attention_batch view = b.view(out);
    mutate(b, view);  // b's vectors are what view points to
    th_error err;
    CHECK(p.vtable<th_attention_vtable>().forward(p.handle(), &view, &err) == TH_ERR_INVALID_ARGUMENT);
    CHECK(out == before);
    const std::string text = err.text();
    REQUIRE(text.rfind(prefix, 0) == 0);
    return text.substr(prefix.size());
  };
  const std::vector<std::pair<const char*, std::function<void(AttentionBatch&, th_attention_batch&)>>> cases = {
      {"NULL q", [](AttentionBatch&, th_attention_batch& v) { v.q = nullptr; }},
      {"layer", [](AttentionBatch&, th_attention_batch& v) { v.layer = 2; }},
      {"n_heads", [](AttentionBatch&, th_attention_batch& v) { v.n_heads = 3; }},
      {"position", [](AttentionBatch& b, th_attention_batch&) { b.positions[0] = int32_t(b.kv_len[0]); }},
      {"block table", [&](AttentionBatch& b, th_attention_batch&) { b.tables[0] = bad_table.data(); }},
      {"q stride", [](AttentionBatch&, th_attention_batch& v) { v.q_row_stride = 1; }},
      {"seq_start", [&](AttentionBatch& b, th_attention_batch& v) {
         bad_start = b.seq_start;
         std::swap(bad_start[1], bad_start[2]);
         v.seq_start = bad_start.data();
       }},
  };
  for (const auto& [what, mutate] : cases) {
    INFO(what);
    const std::string want = message_of(*reference, "attention.reference: ", mutate);
    const std::string got = message_of(*attn, "attention.cpu_flash: ", mutate);
    CHECK(got == want);
  }
}

}  // namespace attention_cpu_flash_tests
