// The compute-backend seam: the registry, the CPU backend running the forward pass, the CUDA backend
// listed but refusing engines until it computes, and device strings resolved to them.
#include <catch2/catch.hpp>

#include <algorithm>

#include "backends/backend.hpp"
#include "backends/cpu/forward.hpp"
#include "files.hpp"
#include "harness.hpp"
#include "skip.hpp"
#include "backends/cpu/matmul.hpp"
#include "runtime/gguf_model.hpp"
#include "runtime/make_model.hpp"
#include "base/step.hpp"
#include "plugin/step_plugins.hpp"
#include "runtime/synthetic_model.hpp"

namespace backends_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

TEST_CASE("backends: the CPU first, then CUDA, and device strings find them", "[backends]") {
  REQUIRE(backends().size() >= 2);
  REQUIRE(std::string(backends().front()->name()) == "cpu");
  int32_t index = -1;
  REQUIRE(find_backend("cpu", &index) == backends().front());
  REQUIRE(index == 0);
  const Backend* cuda = find_backend("cuda:3", &index);
  REQUIRE(cuda != nullptr);
  REQUIRE(std::string(cuda->name()) == "cuda");
  REQUIRE(index == 3);
  for (const char* bad : {"tpu", "tpu:0", "cuda:", "cuda:x", "cuda:-1", ""}) {
    INFO(bad);
    REQUIRE(find_backend(bad) == nullptr);
  }
  REQUIRE(find_backend("cpu")->cannot_run(0).empty());
  REQUIRE_THAT(find_backend("cpu")->cannot_run(1), Contains("no cpu:1"));
  REQUIRE(find_backend("cpu")->devices().size() == 1);
  // Whatever GPUs this machine has, the CUDA backend runs no engine yet, and says so.
  REQUIRE_THAT(cuda->cannot_run(0), Contains("does not compute yet"));
  for (const auto& d : cuda->devices()) REQUIRE(d.kind == TH_DEVICE_CUDA);
}

TEST_CASE("backends: device names come from the kind table, read back the same everywhere", "[backends]") {
  // Every backend's name is its kind's row, and every row parses back to that kind.
  for (const Backend* b : backends()) {
    INFO(b->name());
    REQUIRE(device_kind_named(b->name()) == b->kind());
    REQUIRE(std::string(b->name()) == device_kind_name(b->kind()));
  }
  REQUIRE(device_kind_names() == std::vector<std::string>{"cpu", "cuda"});
  REQUIRE_FALSE(device_kind_named("gpu").has_value());
  // Device strings: a kind, then an index of up to 6 digits; the string a ref prints parses back to it.
  std::string why;
  for (const char* good : {"cpu", "cpu:0", "cuda:0", "cuda:12", "cuda:999999"}) {
    INFO(good);
    const auto ref = parse_device(good, &why);
    REQUIRE(ref.has_value());
    const auto again = parse_device(ref->str());
    REQUIRE(again.has_value());
    REQUIRE(again->kind == ref->kind);
    REQUIRE(again->index == ref->index);
  }
  REQUIRE(parse_device("cuda:12")->str() == "cuda:12");
  REQUIRE(parse_device("cpu")->str() == "cpu");
  REQUIRE_FALSE(parse_device("tpu:0", &why));
  REQUIRE(why == "unknown device kind 'tpu'");
  REQUIRE_FALSE(parse_device("cuda:1234567", &why));
  REQUIRE_THAT(why, Contains("at most 6 digits, found '1234567'"));
  REQUIRE_FALSE(find_backend("cuda:x", nullptr, &why));
  REQUIRE_THAT(why, Contains("found 'x'"));
  // The devices found are looked up by the same refs.
  REQUIRE(find_device(DeviceRef{TH_DEVICE_CPU, 0}) == &devices().front());
  REQUIRE(find_device(DeviceRef{TH_DEVICE_CPU, 1}) == nullptr);
}

TEST_CASE("backends: the CPU backend's step is the forward pass, marked rows included", "[backends]") {
  auto rng = fresh_rng("cpu backend step");
  const ModelSpec spec = model_spec(4, 2, 16, 2);
  const auto weights = make_synthetic_weights(spec, rng());
  toml::table kv;
  kv.insert("block_size", 4);
  kv.insert("n_blocks", 64);
  std::vector<int32_t> tokens(9);
  for (auto& t : tokens) t = int32_t(rng() % spec.info.vocab_size);
  StepItem item{1, 0, tokens, true, nullptr};
  item.logit_rows = 3;
  std::vector<std::vector<std::vector<float>>> runs;
  for (int via_backend = 0; via_backend < 2; ++via_backend) {
    auto attention = make_plugin("attention.reference", spec);
    auto kvcache = make_plugin("kvcache.paged", spec, kv);
    SlotInstances instances;
    instances.set(slot_of(TH_KIND_ATTENTION), attention);
    instances.set(slot_of(TH_KIND_KVCACHE), kvcache);
    const StepPlugins plugins{&instances};
    const Backend& cpu = *find_backend("cpu");
    runs.push_back(via_backend ? cpu.run_step(*cpu.place_weights(weights, 0, WeightPlacement{}), StepBatch{{item}}, plugins)
                               : forward_step(*weights, StepBatch{{item}}, plugins));
  }
  REQUIRE(runs[0].size() == 3);
  REQUIRE(runs[1] == runs[0]);
  REQUIRE_THROWS_WITH(find_backend("cuda:0")->place_weights(weights, 0, WeightPlacement{}), Contains("does not compute yet"));
}

TEST_CASE("backends: memory is each backend's, reached by device kind, with typed refusals", "[backends]") {
  const Backend& cpu = *find_backend(TH_DEVICE_CPU);
  REQUIRE(std::string(cpu.name()) == "cpu");
  REQUIRE(std::string(find_backend(TH_DEVICE_CUDA)->name()) == "cuda");
  std::string why;
  th_status status = TH_OK;
  for (size_t bytes : {size_t(1), size_t(4096), size_t(16) << 20}) {  // 16 MiB: the huge-page path
    for (size_t alignment : {size_t(64), size_t(4096)}) {
      void* p = device_alloc(TH_DEVICE_CPU, 0, bytes, alignment, why, &status);
      REQUIRE(p != nullptr);
      REQUIRE(status == TH_OK);
      REQUIRE(reinterpret_cast<uintptr_t>(p) % alignment == 0);
      static_cast<volatile char*>(p)[bytes - 1] = 1;  // the whole range is ours
      device_free(TH_DEVICE_CPU, p);
    }
  }
  REQUIRE(cpu.alloc(1, 64, 64, why, status) == nullptr);
  REQUIRE(status == TH_ERR_UNSUPPORTED);
  REQUIRE_THAT(why, Contains("no CPU device 1"));
  REQUIRE(device_alloc(static_cast<th_device_kind>(7), 0, 64, 64, why, &status) == nullptr);
  REQUIRE(status == TH_ERR_UNSUPPORTED);
  REQUIRE_THAT(why, Contains("no device of kind 7"));
  REQUIRE(find_backend(TH_DEVICE_CUDA)->alloc(0, 64, 512, why, status) == nullptr);  // more than cudaMalloc aligns
  REQUIRE(status == TH_ERR_INVALID_ARGUMENT);
  REQUIRE_THAT(why, Contains("alignment 512"));
}

TEST_CASE("backends: the CPU backend packs a quantized model's matrices at placement, once, and only when asked",
          "[backends]") {
  const auto sets = matmul_kernel_sets();
  if (std::find(sets.begin(), sets.end(), "avx512") == sets.end())
    skip_test("this CPU lacks the avx512 kernel set, the only one that packs weights");
  const std::string before = matmul_kernels();
  use_matmul_kernels("avx512");
  TempDir dir;
  MakeModelOptions o;
  o.path = dir.file("q.gguf");
  o.seed = fresh_rng("cpu placement")();
  o.type = TH_DTYPE_Q8_0;
  o.shape.ffn_dim = 192;  // Q8_0 rows: multiples of 32
  make_model(o);
  const auto loaded = load_gguf_model(o.path, "q").weights;
  const Backend& cpu = *find_backend(TH_DEVICE_CPU);
  WeightPlacement off;
  off.pack = false;
  const auto packed = cpu.place_weights(loaded, 0, WeightPlacement{});
  const auto plain = cpu.place_weights(loaded, 0, off);
  const auto again = cpu.place_weights(packed, 0, WeightPlacement{});
  use_matmul_kernels(before);
  REQUIRE(loaded->packed_bytes == 0);  // loading maps the file and packs nothing
  REQUIRE(plain == loaded);
  REQUIRE(packed != loaded);
  REQUIRE(packed->packed_bytes > 0);
  REQUIRE(packed->storage == loaded->storage);  // the mapping shared, not copied
  REQUIRE(packed->layers[0].wq.packed != nullptr);
  // Every packed copy lies in one allocation (in huge pages from 8 MiB on), one after the other.
  REQUIRE(packed->packed_storage.size() == 1);
  const auto* arena = static_cast<const uint8_t*>(packed->packed_storage.front().get());
  const uint8_t* end = arena;
  for (const auto& L : packed->layers)
    for (const WeightView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.experts[0].gate, &L.experts[0].up, &L.experts[0].down}) {
      const auto* at = static_cast<const uint8_t*>(m->packed);
      REQUIRE(at >= end);
      end = at + m->packed_row_bytes * size_t(m->rows);
    }
  REQUIRE(end <= arena + packed->packed_bytes);
  REQUIRE(again == packed);  // placing placed weights packs nothing more
}

}  // namespace backends_tests
