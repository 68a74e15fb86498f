// The compute-backend seam: the registry, the CPU backend running the forward pass, the CUDA backend
// listed but refusing engines until it computes, and device strings resolved to them.
#include <catch2/catch.hpp>

#include "backends/backend.hpp"
#include "backends/cpu/forward.hpp"
#include "harness.hpp"
#include "runtime/synthetic_model.hpp"

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
    const StepPlugins plugins{attention.get(), kvcache.get(), nullptr};
    const Backend& cpu = *find_backend("cpu");
    runs.push_back(via_backend ? cpu.run_step(*cpu.place_weights(weights, 0), StepBatch{{item}}, plugins)
                               : forward_step(*weights, StepBatch{{item}}, plugins));
  }
  REQUIRE(runs[0].size() == 3);
  REQUIRE(runs[1] == runs[0]);
  REQUIRE_THROWS_WITH(find_backend("cuda:0")->place_weights(weights, 0), Contains("does not compute yet"));
}
