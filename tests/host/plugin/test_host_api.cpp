// The host API table plugins call: errors, typed config look-up, metrics, memory, model_run, the
// compute pool (with the SDK helper over it).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "harness.hpp"
#include "plugin/host_api.hpp"
#include "base/compute_pool.hpp"

#include <tokenhost/plugin.hpp>

namespace plugin_host_api_tests {

using namespace tokenhost;
using Catch::Matchers::Contains;

TEST_CASE("host api: the table is complete and versioned", "[host_api]") {
  const th_host_api* api = host_api();
  REQUIRE(api->struct_size == sizeof(th_host_api));
  REQUIRE(api->abi_major == TH_ABI_VERSION_MAJOR);
  REQUIRE(api->abi_minor == TH_ABI_VERSION_MINOR);
  REQUIRE(std::string(api->host_version) == TOKENHOST_VERSION);
  const void* const* members = reinterpret_cast<const void* const*>(&api->error_set);
  size_t n = (sizeof(th_host_api) - offsetof(th_host_api, error_set)) / sizeof(void*);
  for (size_t i = 0; i < n; ++i) REQUIRE(members[i] != nullptr);
}

TEST_CASE("host api: error_set appends copies of each message", "[host_api]") {
  th_error err;
  std::string text = "first";
  host_api()->error_set(&err, text.c_str());
  text = "overwritten";  // the host copied it
  host_api()->error_set(&err, "second");
  host_api()->error_set(nullptr, "ignored");
  REQUIRE(err.messages == std::vector<std::string>{"first", "second"});
  REQUIRE(err.text() == "first; second");
}

TEST_CASE("host api: typed config look-up", "[host_api]") {
  th_config c;
  c.table = toml::parse("n = 3\nx = 2.5\nflag = true\nname = \"abc\"\n[sub]\ndepth = 7\n");
  const th_host_api& api = *host_api();
  int64_t i = 0;
  double d = 0;
  int32_t b = 0;
  REQUIRE(api.config_get_int(&c, "n", &i) == TH_OK);
  REQUIRE(i == 3);
  REQUIRE(api.config_get_int(&c, "sub.depth", &i) == TH_OK);
  REQUIRE(i == 7);
  REQUIRE(api.config_get_double(&c, "x", &d) == TH_OK);
  REQUIRE(d == 2.5);
  REQUIRE(api.config_get_double(&c, "n", &d) == TH_OK);  // an integer where a number is asked
  REQUIRE(d == 3.0);
  REQUIRE(api.config_get_bool(&c, "flag", &b) == TH_OK);
  REQUIRE(b == 1);
  REQUIRE(api.config_get_int(&c, "x", &i) == TH_ERR_INVALID_ARGUMENT);
  REQUIRE(api.config_get_int(&c, "missing", &i) == TH_ERR_NOT_FOUND);
  size_t needed = 0;
  REQUIRE(api.config_get_string(&c, "name", nullptr, 0, &needed) == TH_ERR_RESOURCE_EXHAUSTED);
  REQUIRE(needed == 4);
  char small[2];
  REQUIRE(api.config_get_string(&c, "name", small, sizeof small, &needed) == TH_ERR_RESOURCE_EXHAUSTED);
  char buf[8];
  REQUIRE(api.config_get_string(&c, "name", buf, sizeof buf, &needed) == TH_OK);
  REQUIRE(std::strcmp(buf, "abc") == 0);
  REQUIRE(api.config_get_string(&c, "n", buf, sizeof buf, &needed) == TH_ERR_INVALID_ARGUMENT);
}

TEST_CASE("host api: plugin metrics are labelled by engine and plugin", "[host_api]") {
  metrics::Registry registry;
  th_host_ctx ctx;
  ctx.plugin_id = "scheduler.x";
  ctx.engine = "e1";
  ctx.metrics = &registry;
  const char* labels[] = {"kind"};
  th_metric_desc counter{sizeof(th_metric_desc), TH_METRIC_COUNTER, "decisions_total", "Decisions", labels, 1, nullptr, 0};
  th_metric* m = nullptr;
  th_error err;
  REQUIRE(host_api()->metric_create(&ctx, &counter, &m, &err) == TH_OK);
  const char* values[] = {"prefill"};
  host_api()->metric_add(m, values, 2);
  host_api()->metric_add(m, values, 3);
  auto* family = registry.find("tokenhost_plugin_decisions_total");
  REQUIRE(family != nullptr);
  REQUIRE(family->value({"e1", "scheduler.x", "prefill"}) == 5);
  REQUIRE_THAT(registry.prometheus_text(),
               Contains("tokenhost_plugin_decisions_total{engine=\"e1\",plugin=\"scheduler.x\",kind=\"prefill\"} 5"));
  th_metric_desc bad{sizeof(th_metric_desc), TH_METRIC_GAUGE, "bad name", "x", nullptr, 0, nullptr, 0};
  REQUIRE(host_api()->metric_create(&ctx, &bad, &m, &err) == TH_ERR_INVALID_ARGUMENT);
  REQUIRE_THAT(err.text(), Contains("bad name"));
  // The host labels every engine series with its A/B experiment and arm: a plugin cannot take those names.
  const char* arm_label[] = {"arm"};
  th_metric_desc reserved{sizeof(th_metric_desc), TH_METRIC_COUNTER, "by_arm_total", "x", arm_label, 1, nullptr, 0};
  REQUIRE(host_api()->metric_create(&ctx, &reserved, &m, &err) == TH_ERR_INVALID_ARGUMENT);
  REQUIRE_THAT(err.text(), Contains("label 'arm' is reserved"));
}

TEST_CASE("host api: memory is aligned, accounted per instance, and leaks are freed", "[host_api]") {
  th_error err;
  void* p = nullptr;
  {
    th_host_ctx ctx;
    ctx.plugin_id = "kvcache.x";
    REQUIRE(host_api()->mem_alloc(&ctx, TH_DEVICE_CPU, 0, 1000, 4096, &p, &err) == TH_OK);
    REQUIRE(reinterpret_cast<uintptr_t>(p) % 4096 == 0);
    std::memset(p, 0xab, 1000);
    REQUIRE(ctx.bytes_allocated == 1000);
    void* q = nullptr;
    REQUIRE(host_api()->mem_alloc(&ctx, TH_DEVICE_CPU, 0, 64, 0, &q, &err) == TH_OK);
    host_api()->mem_free(&ctx, q);
    REQUIRE(ctx.bytes_allocated == 1000);
    REQUIRE(host_api()->mem_alloc(&ctx, TH_DEVICE_CPU, 0, 64, 48, &q, &err) == TH_ERR_INVALID_ARGUMENT);
    REQUIRE_THAT(err.text(), Contains("not a power of two"));
  }  // p is leaked on purpose: the context frees it (AddressSanitizer runs would flag a real leak)
}

TEST_CASE("host api: mem_alloc answers UNSUPPORTED for a device the host lacks, OUT_OF_MEMORY when it has no room",
          "[host_api]") {
  th_error err;
  void* p = nullptr;
  th_host_ctx ctx;
  // A CUDA device index no machine has, and a device kind the ABI does not define.
  REQUIRE(host_api()->mem_alloc(&ctx, TH_DEVICE_CUDA, 1 << 20, 64, 0, &p, &err) == TH_ERR_UNSUPPORTED);
  REQUIRE_THAT(err.text(), Contains("no CUDA device 1048576"));
  REQUIRE(host_api()->mem_alloc(&ctx, 7, 0, 64, 0, &p, &err) == TH_ERR_UNSUPPORTED);
  // More host memory than any address space holds.
  th_error oom;
  REQUIRE(host_api()->mem_alloc(&ctx, TH_DEVICE_CPU, 0, size_t(1) << 62, 0, &p, &oom) == TH_ERR_OUT_OF_MEMORY);
  REQUIRE_THAT(oom.text(), Contains("out of host memory"));
  REQUIRE(p == nullptr);
  REQUIRE(ctx.bytes_allocated == 0);
}

TEST_CASE("host api: model_run answers unsupported until the runtime can run another model", "[host_api]") {
  th_error err;
  th_model_run_request req{sizeof(th_model_run_request), "draft", nullptr, 0, 4, 0.0f, 1};
  int32_t out[4];
  th_model_run_result res{sizeof(th_model_run_result), out, 4, 0};
  REQUIRE(host_api()->model_run(nullptr, &req, &res, &err) == TH_ERR_UNSUPPORTED);
  REQUIRE_THAT(err.text(), Contains("model_run"));
}

namespace {
struct PoolProbe {
  std::vector<std::atomic<int>> hits;
  std::mutex mutex;
  std::set<std::thread::id> threads;
  std::atomic<size_t> bad_ranges{0};
  size_t grain = 0;
  explicit PoolProbe(size_t n) : hits(n) {}
  static void run(void* arg, size_t begin, size_t end) {
    auto& p = *static_cast<PoolProbe*>(arg);
    if (begin >= end || (p.grain != 0 && (begin % p.grain != 0 || end - begin > p.grain))) ++p.bad_ranges;
    for (size_t i = begin; i < end; ++i) ++p.hits[i];
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // long enough that every thread joins in
    std::lock_guard lock(p.mutex);
    p.threads.insert(std::this_thread::get_id());
  }
};
}  // namespace

TEST_CASE("host api: parallel_for runs every index once on the compute pool, within max_threads", "[host_api]") {
  const th_host_api& api = *host_api();
  const uint32_t threads = api.compute_threads(nullptr);
  REQUIRE(threads == compute_pool().threads());
  for (size_t grain : {size_t(0), size_t(1), size_t(7)}) {
    for (uint32_t max_threads : {0u, 1u, 2u}) {
      INFO("grain " << grain << ", max_threads " << max_threads);
      PoolProbe probe(1000);
      probe.grain = grain;
      api.parallel_for(nullptr, probe.hits.size(), grain, max_threads, PoolProbe::run, &probe);
      REQUIRE(probe.bad_ranges == 0);
      for (const auto& h : probe.hits) REQUIRE(h == 1);
      const size_t allowed = max_threads == 0 ? threads : std::min<size_t>(max_threads, threads);
      REQUIRE(probe.threads.size() <= allowed);
      if (max_threads == 1) REQUIRE(*probe.threads.begin() == std::this_thread::get_id());
    }
  }
  api.parallel_for(nullptr, 0, 0, 0, PoolProbe::run, nullptr);  // nothing to do: fn is not called
}

TEST_CASE("host api: an instance of an engine on a compute partition computes on the partition's pool", "[host_api][compute_pool]") {
  const th_host_api& api = *host_api();
  th_host_ctx ctx;
  ctx.pool = std::make_shared<ComputePool>(3);
  REQUIRE(api.compute_threads(&ctx) == 3);
  const uint64_t process_jobs = process_compute_pool().jobs();
  PoolProbe probe(300);
  api.parallel_for(&ctx, probe.hits.size(), 0, 0, PoolProbe::run, &probe);
  for (const auto& h : probe.hits) REQUIRE(h == 1);
  REQUIRE(ctx.pool->jobs() == 1);
  REQUIRE(probe.threads.size() <= 3);
  REQUIRE(process_compute_pool().jobs() == process_jobs);  // the process-wide pool did not run it
  // An instance without a partition (ctx NULL or its pool NULL) has the process-wide pool.
  th_host_ctx shared;
  REQUIRE(api.compute_threads(&shared) == process_compute_pool().threads());
}

TEST_CASE("host api: the SDK's parallel_for carries an exception back to the caller", "[host_api]") {
  sdk::g_host = host_api();
  std::vector<std::atomic<int>> hits(500);
  sdk::parallel_for(nullptr, hits.size(), 3, 0, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) ++hits[i];
  });
  for (const auto& h : hits) REQUIRE(h == 1);
  try {
    sdk::parallel_for(nullptr, hits.size(), 1, 0, [&](size_t begin, size_t) {
      if (begin == 250) throw std::runtime_error("piece 250 failed");
    });
    FAIL("the exception was lost");
  } catch (const std::runtime_error& e) {
    REQUIRE(std::string(e.what()) == "piece 250 failed");
  }
}

}  // namespace plugin_host_api_tests

namespace plugin_host_api_tests {

TEST_CASE("host api: grouped_matmul computes each group through its weights, and refuses broken arguments by name",
          "[host_api][moe]") {
  const th_host_api* api = host_api();
  // Two groups of f32 weights [2 rows][4 cols]: group 0 takes row 0, group 1 rows 1 and 2.
  std::vector<float> w0 = {1, 0, 0, 0, 0, 1, 0, 0}, w1 = {0, 0, 1, 0, 0, 0, 0, 2};
  auto tensor = [](std::vector<float>& v) {
    th_tensor t{};
    t.struct_size = sizeof t;
    t.dtype = TH_DTYPE_F32;
    t.n_dims = 2;
    t.ne[0] = 4, t.ne[1] = 2, t.ne[2] = t.ne[3] = 1;
    t.nb[0] = 4, t.nb[1] = 16;
    t.data = v.data();
    t.device = TH_DEVICE_CPU;
    return t;
  };
  std::vector<th_tensor> weights = {tensor(w0), tensor(w1)};
  std::vector<uint32_t> row_begin = {0, 1, 3};
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<float> y(6, -1.0f);
  float* ys[] = {y.data()};
  th_grouped_matmul_args a{sizeof a, 2, 1, 4, weights.data(), row_begin.data(), x.data(), ys};
  th_error err;
  REQUIRE(api->grouped_matmul(nullptr, &a, &err) == TH_OK);
  CHECK(y == std::vector<float>{1, 2, 7, 16, 11, 24});

  auto refused = [&](th_grouped_matmul_args bad, const std::string& message) {
    std::fill(y.begin(), y.end(), -1.0f);
    th_error e;
    CHECK(api->grouped_matmul(nullptr, &bad, &e) == TH_ERR_INVALID_ARGUMENT);
    CHECK_THAT(e.text(), Contains("grouped_matmul: " + message));
    CHECK(y == std::vector<float>(6, -1.0f));  // nothing written
  };
  th_grouped_matmul_args bad = a;
  bad.struct_size = 8;
  refused(bad, "struct_size 8 is below");
  bad = a, bad.n_products = 5;
  refused(bad, "n_products 5 is outside 1..4");
  std::vector<uint32_t> descending = {0, 2, 1};
  bad = a, bad.row_begin = descending.data();
  refused(bad, "row_begin[2] = 1 is below row_begin[1] = 2");
  float* no_y[] = {nullptr};
  bad = a, bad.y = no_y;
  refused(bad, "y[0] is NULL");
  std::vector<th_tensor> short_rows = weights;
  short_rows[1].nb[1] = 8;
  bad = a, bad.weights = short_rows.data();
  refused(bad, "weights[1] (group 1, product 0): nb[1] = 8 bytes, below a row's 16");
  std::vector<th_tensor> other_rows = weights;
  other_rows[1].ne[1] = 1;
  bad = a, bad.weights = other_rows.data();
  refused(bad, "weights[1] (group 1, product 0): 1 rows, product 0's other weights have 2");
  std::vector<th_tensor> q8 = weights;
  q8[0].dtype = TH_DTYPE_Q8_0;
  bad = a, bad.weights = q8.data();
  refused(bad, "cols = 4 is not a multiple of q8_0's block of 32");
  // An empty group's weights are not read: NULL data there is fine.
  std::vector<th_tensor> unread = weights;
  unread[0].data = nullptr;
  std::vector<uint32_t> first_empty = {0, 0, 3};
  th_grouped_matmul_args ok = a;
  ok.weights = unread.data(), ok.row_begin = first_empty.data();
  REQUIRE(api->grouped_matmul(nullptr, &ok, &err) == TH_OK);
  CHECK(y == std::vector<float>{3, 8, 7, 16, 11, 24});
}

}  // namespace plugin_host_api_tests
