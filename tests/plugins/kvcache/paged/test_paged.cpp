// kvcache.paged: exact block accounting against a model, forks and copy-on-write (data included),
// pool exhaustion, seq_free, the kv_blocks_used gauge, layout and configuration validation.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "harness.hpp"
#include "kv_cache.hpp"

namespace kvcache_paged_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const ModelSpec kSpec = model_spec(4, 2, 4, /*n_layers=*/2);

std::vector<float> random_floats(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = uni(rng);
  return v;
}

}  // namespace

TEST_CASE("kvcache.paged layout follows the documented [layer][block][head][token][d] f32 strides", "[kvcache][paged]") {
  KvCache c("kvcache.paged", model_spec(4, 2, 8, 3), 16, 10);
  const th_kv_layout& l = *c.layout;
  CHECK(l.n_layers == 3);
  CHECK(l.n_kv_heads == 2);
  CHECK(l.head_dim == 8);
  CHECK(l.quant_group == 0);
  CHECK(l.token_stride == 8 * 4);
  CHECK(l.head_stride == 16 * l.token_stride);
  CHECK(l.block_stride == 2 * l.head_stride);
  CHECK(l.layer_stride == 10 * l.block_stride);
  CHECK(l.k_base != nullptr);
  CHECK(l.v_base != nullptr);
  CHECK(l.k_base != l.v_base);
  const th_kv_stats s = c.stats();
  CHECK(s.total_blocks == 10);
  CHECK(s.free_blocks == 10);
  CHECK(s.used_blocks == 0);
  CHECK(s.n_seqs == 0);
}

TEST_CASE("kvcache.paged accounting is exact over random reserve/fork/free", "[kvcache][paged]") {
  auto rng = fresh_rng("kvcache.paged random accounting");
  metrics::Registry registry;
  KvCache c("kvcache.paged", kSpec, 4, 40, &registry);
  const metrics::Family* gauge = registry.find("tokenhost_plugin_kv_blocks_used");
  REQUIRE(gauge != nullptr);
  run_random_kv_ops(c, rng, 400, /*check_data=*/false, gauge, {"test", "kvcache.paged"});
}

TEST_CASE("kvcache.paged fork shares blocks and copy-on-write copies the data", "[kvcache][paged]") {
  auto rng = fresh_rng("kvcache.paged fork/COW");
  const th_dtype dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  INFO("kv dtype " << quant::dtype_name(dtype));
  const uint32_t bs = 4;
  KvCache c("kvcache.paged", with_kv_dtype(kSpec, dtype), bs, 16);
  const uint32_t len = 10;  // blocks 0, 1, 2 (the last one half full)
  REQUIRE(c.reserve(1, len, 0) == TH_OK);
  const std::vector<int32_t> parent = c.table(1);
  REQUIRE(parent.size() == 3);
  std::vector<std::vector<float>> old(len);
  for (uint32_t p = 0; p < len; ++p) {
    old[p] = random_floats(rng, c.floats_per_position());
    c.write_position(parent, p, old[p]);
  }

  REQUIRE(c.fork(1, 2) == TH_OK);
  CHECK(c.table(2) == parent);
  th_kv_stats s = c.stats();
  CHECK(s.n_seqs == 2);
  CHECK(s.used_blocks == 3);
  CHECK(s.shared_blocks == 3);

  // The child rewrites from position 6 (inside block 1) and grows to 13: blocks 1 and 2 are copied,
  // block 0 stays shared, one block is added.
  const uint32_t first_write = 6, n = 13;
  REQUIRE(c.reserve(2, n, first_write) == TH_OK);
  const std::vector<int32_t> child = c.table(2);
  REQUIRE(child.size() == 4);
  CHECK(child[0] == parent[0]);
  CHECK(child[1] != parent[1]);
  CHECK(child[2] != parent[2]);
  CHECK(c.table(1) == parent);
  s = c.stats();
  CHECK(s.used_blocks == 6);
  CHECK(s.shared_blocks == 1);
  CHECK(s.used_blocks + s.free_blocks == s.total_blocks);

  // Before writing: the child's copies hold the parent's data at every old position.
  for (uint32_t p = 0; p < len; ++p) REQUIRE(c.read_position(child, p) == old[p]);
  std::vector<std::vector<float>> fresh(n);
  for (uint32_t p = first_write; p < n; ++p) {
    fresh[p] = random_floats(rng, c.floats_per_position());
    c.write_position(child, p, fresh[p]);
  }
  for (uint32_t p = 0; p < len; ++p) REQUIRE(c.read_position(parent, p) == old[p]);  // parent unchanged
  for (uint32_t p = 0; p < n; ++p) {
    INFO("child position " << p);
    REQUIRE(c.read_position(child, p) == (p < first_write ? old[p] : fresh[p]));
  }

  // A write into a block no longer shared copies nothing.
  REQUIRE(c.reserve(2, n, first_write) == TH_OK);
  CHECK(c.table(2) == child);
  CHECK(c.stats().used_blocks == 6);
}

TEST_CASE("kvcache.paged reserve beyond the pool is TH_ERR_RESOURCE_EXHAUSTED and changes nothing", "[kvcache][paged]") {
  auto rng = fresh_rng("kvcache.paged exhaustion");
  const th_dtype dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  INFO("kv dtype " << quant::dtype_name(dtype));
  const uint32_t bs = 4, total = 8;
  KvCache c("kvcache.paged", with_kv_dtype(kSpec, dtype), bs, total);
  REQUIRE(c.reserve(1, 5 * bs, 0) == TH_OK);  // 5 blocks
  REQUIRE(c.fork(1, 2) == TH_OK);
  const std::vector<int32_t> t1 = c.table(1);
  std::vector<std::vector<float>> data(5 * bs);
  for (uint32_t p = 0; p < 5 * bs; ++p) {
    data[p] = random_floats(rng, c.floats_per_position());
    c.write_position(t1, p, data[p]);
  }
  const th_kv_stats before = c.stats();
  REQUIRE(before.free_blocks == 3);

  auto unchanged = [&] {
    const th_kv_stats s = c.stats();
    CHECK(s.used_blocks == before.used_blocks);
    CHECK(s.free_blocks == before.free_blocks);
    CHECK(s.shared_blocks == before.shared_blocks);
    CHECK(s.n_seqs == before.n_seqs);
    CHECK(c.table(1) == t1);
    CHECK(c.table(2) == t1);
    for (uint32_t p = 0; p < 5 * bs; ++p) REQUIRE(c.read_position(t1, p) == data[p]);
  };
  SECTION("a new sequence larger than the free blocks is not created") {
    CHECK(c.reserve(3, 3 * bs + 1, 0) == TH_ERR_RESOURCE_EXHAUSTED);
    CHECK(contains(c.last_error, "needs 4 free blocks, 3 are free"));
    std::vector<int32_t> none;
    CHECK(c.blocks(3, none) == TH_ERR_NOT_FOUND);
    unchanged();
  }
  SECTION("growth that does not fit") {
    CHECK(c.reserve(1, 9 * bs, 5 * bs) == TH_ERR_RESOURCE_EXHAUSTED);
    unchanged();
  }
  SECTION("copy-on-write copies plus growth that do not fit copy nothing") {
    // Rewriting blocks 2..4 of the shared table (3 copies) and adding one block needs 4.
    CHECK(c.reserve(2, 6 * bs, 2 * bs) == TH_ERR_RESOURCE_EXHAUSTED);
    unchanged();
  }
  SECTION("exactly the free blocks fit") {
    CHECK(c.reserve(3, 3 * bs, 0) == TH_OK);
    CHECK(c.stats().free_blocks == 0);
    CHECK(c.reserve(4, 1, 0) == TH_ERR_RESOURCE_EXHAUSTED);
  }
}

TEST_CASE("kvcache.paged seq_free returns the blocks, and shared ones stay with the other sequence", "[kvcache][paged]") {
  KvCache c("kvcache.paged", kSpec, 4, 12);
  REQUIRE(c.reserve(1, 12, 0) == TH_OK);  // 3 blocks
  REQUIRE(c.reserve(2, 5, 0) == TH_OK);   // 2 blocks
  REQUIRE(c.fork(1, 3) == TH_OK);
  REQUIRE(c.reserve(3, 16, 12) == TH_OK);  // 1 more block of its own
  CHECK(c.stats().used_blocks == 6);
  c.free(2);
  th_kv_stats s = c.stats();
  CHECK(s.used_blocks == 4);
  CHECK(s.free_blocks == 8);
  CHECK(s.n_seqs == 2);
  c.free(1);  // its 3 blocks are still held by 3
  s = c.stats();
  CHECK(s.used_blocks == 4);
  CHECK(s.shared_blocks == 0);
  CHECK(c.table(3).size() == 4);
  c.free(3);
  c.free(3);   // twice: ignored
  c.free(99);  // unknown: ignored
  s = c.stats();
  CHECK(s.used_blocks == 0);
  CHECK(s.free_blocks == 12);
  CHECK(s.n_seqs == 0);
  // All 12 blocks can be reserved again.
  REQUIRE(c.reserve(7, 48, 0) == TH_OK);
  CHECK(c.stats().free_blocks == 0);
}

TEST_CASE("kvcache.paged seq_fork errors", "[kvcache][paged]") {
  KvCache c("kvcache.paged", kSpec, 4, 8);
  REQUIRE(c.reserve(1, 4, 0) == TH_OK);
  REQUIRE(c.reserve(2, 4, 0) == TH_OK);
  CHECK(c.fork(5, 6) == TH_ERR_NOT_FOUND);
  CHECK(contains(c.last_error, "5"));
  CHECK(c.fork(1, 2) == TH_ERR_INVALID_ARGUMENT);
  CHECK(c.stats().n_seqs == 2);
  CHECK(c.stats().shared_blocks == 0);
  std::vector<int32_t> none;
  CHECK(c.blocks(6, none) == TH_ERR_NOT_FOUND);
}

TEST_CASE("kvcache.paged kv_blocks_used gauge equals the used blocks", "[kvcache][paged]") {
  auto rng = fresh_rng("kvcache.paged gauge");
  metrics::Registry registry;
  KvCache c("kvcache.paged", kSpec, 4, 32, &registry);
  const metrics::Family* g = registry.find("tokenhost_plugin_kv_blocks_used");
  REQUIRE(g != nullptr);
  CHECK(g->type() == metrics::Type::gauge);
  const std::vector<std::string> labels = {"test", "kvcache.paged"};
  CHECK(g->value(labels) == 0);
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    REQUIRE(c.reserve(seq, std::uniform_int_distribution<uint32_t>(1, 20)(rng), 0) == TH_OK);
    CHECK(g->value(labels) == double(c.stats().used_blocks));
  }
  REQUIRE(c.fork(3, 30) == TH_OK);
  CHECK(g->value(labels) == double(c.stats().used_blocks));
  REQUIRE(c.reserve(30, 24, 0) == TH_OK);
  CHECK(g->value(labels) == double(c.stats().used_blocks));
  for (uint64_t seq : {1, 3, 30}) {
    c.free(seq);
    CHECK(g->value(labels) == double(c.stats().used_blocks));
  }
  CHECK(g->value(labels) > 0);
}

TEST_CASE("kvcache.paged keeps an f16 cache in half the bytes, with the same strides formula", "[kvcache][paged]") {
  KvCache f32("kvcache.paged", model_spec(4, 2, 8, 3), 16, 10);
  KvCache f16("kvcache.paged", with_kv_dtype(model_spec(4, 2, 8, 3), TH_DTYPE_F16), 16, 10);
  const th_kv_layout& l = *f16.layout;
  CHECK(l.dtype == TH_DTYPE_F16);
  CHECK(l.quant_group == 0);
  CHECK(l.token_stride == 8 * 2);
  CHECK(l.head_stride == 16 * l.token_stride);
  CHECK(l.block_stride == 2 * l.head_stride);
  CHECK(l.layer_stride == 10 * l.block_stride);
  CHECK(2 * l.layer_stride == f32.layout->layer_stride);
  // The last element of the last position of the pool is writable (the pool is as large as the formula).
  REQUIRE(f16.reserve(1, 16 * 10, 0) == TH_OK);
  const std::vector<int32_t> t = f16.table(1);
  std::vector<float> last(f16.floats_per_position(), 0.5f);
  last.back() = -1.25f;
  f16.write_position(t, 16 * 10 - 1, last);
  CHECK(f16.read_position(t, 16 * 10 - 1) == last);
}

TEST_CASE("kvcache.paged refuses kv dtypes other than f32, f16 and q8_0 by name, and has no dtype setting", "[kvcache][paged]") {
  for (const auto& [dtype, name] : {std::pair{TH_DTYPE_BF16, "bf16"}, std::pair{TH_DTYPE_Q4_0, "q4_0"}}) {
    INFO(name);
    try {
      make_plugin("kvcache.paged", with_kv_dtype(kSpec, dtype), {});
      FAIL("kvcache.paged accepted kv dtype " << name);
    } catch (const PluginError& e) {
      INFO(e.what());
      CHECK(contains(e.what(), std::string("keeps kv dtype f32, f16 or q8_0, the model's kv dtype is ") + name));
    }
  }
  SECTION("create() itself") {
    auto lib = builtin_catalog().load("kvcache.paged");
    th_host_ctx ctx;
    ctx.plugin_id = "kvcache.paged";
    ctx.engine = "test";
    th_config config{lib->manifest().defaults};
    const th_model_info info = with_kv_dtype(kSpec, TH_DTYPE_Q4_0).to_abi();
    const th_device device{sizeof(th_device), TH_DEVICE_CPU, 0, "cpu", 0, 1};
    const th_create_args args{sizeof(th_create_args), &ctx, &config, &info, &device, nullptr};
    th_instance* out = nullptr;
    th_error err;
    CHECK(lib->head().create(&args, &out, &err) == TH_ERR_UNSUPPORTED);
    CHECK(out == nullptr);
    CHECK(contains(err.text(), "q4_0"));
  }
  SECTION("the element type is the engine's, not a setting (a manifest naming 'dtype' is refused)") {
    const auto manifest = builtin_catalog().find("kvcache.paged");
    REQUIRE(manifest);
    CHECK(manifest->param("dtype") == nullptr);
  }
  SECTION("block_size out of range") {
    CHECK_THROWS_WITH(make_plugin("kvcache.paged", kSpec, kv_config(0, 8)),
                      Catch::Contains("'block_size' in the settings of kvcache.paged is out of range [1, 1024]"));
  }
}

TEST_CASE("kvcache.paged check() refuses pools larger than the device's memory, naming the bytes", "[kvcache][paged]") {
  auto lib = builtin_catalog().load("kvcache.paged");
  const th_model_info info = kSpec.to_abi();  // 2 layers, 2 KV heads of 4, f32 (16 bytes a head and position)
  auto check = [&](int64_t n_blocks, uint64_t memory, th_error& err) {
    toml::table settings;
    settings.insert("block_size", 16);
    settings.insert("n_blocks", n_blocks);
    th_config config{settings};
    const th_device device{sizeof(th_device), TH_DEVICE_CPU, 0, "cpu", memory, 1};
    const th_check_query query{sizeof(th_check_query), &info, &device, &config};
    return lib->head().check(&query, &err);
  };
  // K and V: 2 x 2 layers x n_blocks x 2 heads x 16 positions x 4 floats x 4 bytes = 2048 bytes a block.
  th_error fits, too_big, unknown;
  CHECK(check(1024, 2048 * 1024, fits) == TH_OK);
  CHECK(check(1025, 2048 * 1024, too_big) == TH_ERR_UNSUPPORTED);
  CHECK(contains(too_big.text(), "the K and V pools need 2099200 bytes (2 MiB), more than the 2097152 bytes of memory of device cpu"));
  CHECK(check(1025, 0, unknown) == TH_OK);  // memory unknown: nothing to check against
}

TEST_CASE("kvcache.paged seq_drop_blocks releases middle blocks and moves the later ones down with their data", "[kvcache][paged][window]") {
  auto rng = fresh_rng("kvcache.paged drop blocks");
  const th_dtype dtype = GENERATE(TH_DTYPE_F32, TH_DTYPE_F16);
  INFO("kv dtype " << quant::dtype_name(dtype));
  const uint32_t bs = 4, total = 16, len = 22;  // 6 blocks, the last one half full
  KvCache c("kvcache.paged", with_kv_dtype(kSpec, dtype), bs, total);
  REQUIRE(c.reserve(1, len, 0) == TH_OK);
  const std::vector<int32_t> before = c.table(1);
  std::vector<std::vector<float>> data(len);
  for (uint32_t p = 0; p < len; ++p) {
    data[p] = random_floats(rng, c.floats_per_position());
    c.write_position(before, p, data[p]);
  }
  REQUIRE(c.drop(1, 1, 2) == TH_OK);  // blocks 1 and 2 go: positions 12.. move down by 8
  const std::vector<int32_t> after = c.table(1);
  REQUIRE(after.size() == 4);
  CHECK(after[0] == before[0]);
  CHECK(std::vector<int32_t>(after.begin() + 1, after.end()) == std::vector<int32_t>(before.begin() + 3, before.end()));
  th_kv_stats s = c.stats();
  CHECK(s.used_blocks == 4);
  CHECK(s.free_blocks == total - 4);
  CHECK(s.held_blocks == 4);
  for (uint32_t p = 0; p < len - 8; ++p) {
    INFO("position " << p);
    REQUIRE(c.read_position(after, p) == data[p < bs ? p : p + 8]);
  }

  SECTION("a shared block in the range stays its other holder's; a shared one after it is copied, data included") {
    REQUIRE(c.fork(1, 3) == TH_OK);  // every block shared
    const std::vector<int32_t> shared = c.table(1);
    REQUIRE(c.drop(1, 1, 1) == TH_OK);
    const std::vector<int32_t> mine = c.table(1);
    REQUIRE(mine.size() == 3);
    CHECK(mine[0] == shared[0]);          // before the cut: still shared, not rewritten
    CHECK(mine[1] != shared[2]);          // moved and shared: copied
    CHECK(mine[2] != shared[3]);
    CHECK(c.table(3) == shared);          // the other holder keeps all four
    s = c.stats();
    CHECK(s.used_blocks == 6);
    CHECK(s.shared_blocks == 1);
    CHECK(s.used_blocks + s.free_blocks == s.total_blocks);
    for (uint32_t p = bs; p < 3 * bs && p + bs < len - 8; ++p) REQUIRE(c.read_position(mine, p) == c.read_position(shared, p + bs));
  }
  SECTION("bad ranges and unknown sequences are refused, changing nothing") {
    CHECK(c.drop(1, 1, 0) == TH_ERR_INVALID_ARGUMENT);
    CHECK(c.drop(1, 3, 2) == TH_ERR_INVALID_ARGUMENT);  // past the table of 4
    CHECK(contains(c.last_error, "holds 4 blocks"));
    CHECK(c.drop(99, 0, 1) == TH_ERR_NOT_FOUND);
    CHECK(c.table(1) == after);
    CHECK(c.stats().used_blocks == 4);
  }
  SECTION("copies the pool cannot hold: TH_ERR_RESOURCE_EXHAUSTED, nothing changed") {
    REQUIRE(c.fork(1, 4) == TH_OK);
    REQUIRE(c.reserve(5, (total - 4) * bs, 0) == TH_OK);  // the pool is full
    REQUIRE(c.stats().free_blocks == 0);
    CHECK(c.drop(1, 1, 1) == TH_ERR_RESOURCE_EXHAUSTED);  // two shared blocks to copy, none free
    CHECK(c.table(1) == after);
    CHECK(c.table(4) == after);
    CHECK(c.stats().free_blocks == 0);
  }
}

}  // namespace kvcache_paged_tests
