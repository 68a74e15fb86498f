// bench_moe_experts: one MoE layer's routed experts for B tokens at once (moe.topk on the host's grouped
// products: each expert's weights read once for all of its tokens) against the same B tokens one call
// each (a loop over tokens: each token reads its experts' weights again), side by side, alternating,
// median of --runs. The experts are layer 0's of a GGUF model (make-model writes Mixtral- and
// Qwen-MoE-shaped ones); routing is uniform at random, k distinct experts per token.
//   bench_moe_experts --model M.gguf [--batches 1,8,64] [--runs 7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "base/compute_pool.hpp"
#include "model/quant.hpp"
#include "plugin/catalog.hpp"
#include "runtime/generator.hpp"
#include "runtime/gguf_model.hpp"

using namespace tokenhost;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

th_tensor view(const WeightView& w) {
  th_tensor t{};
  t.struct_size = sizeof t;
  t.dtype = w.type;
  t.n_dims = 2;
  t.ne[0] = w.cols, t.ne[1] = w.rows, t.ne[2] = t.ne[3] = 1;
  t.nb[0] = int64_t(quant::block_bytes(w.type));
  t.nb[1] = int64_t(w.row_bytes);
  t.nb[2] = t.nb[3] = t.nb[1] * w.rows;
  t.data = const_cast<void*>(w.data);
  t.device = TH_DEVICE_CPU;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One MoE layer's experts for a batch of tokens: grouped by expert against a loop over tokens"};
  std::string model_path;
  std::vector<size_t> batches = {1, 8, 64};
  int runs = 7;
  app.add_option("--model", model_path, "GGUF MoE model")->required();
  app.add_option("--batches", batches, "Tokens per call, comma-separated")->delimiter(',');
  app.add_option("--runs", runs, "Runs per figure (the median is reported)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  LoadedModel model = load_gguf_model(model_path, "bench");
  const ModelWeights& w = *model.weights;
  const th_model_info& info = w.spec.info;
  if (info.n_experts == 0) {
    std::fprintf(stderr, "%s: not an MoE model\n", model_path.c_str());
    return 2;
  }
  PluginCatalog catalog(default_plugin_paths());
  catalog.scan();
  auto moe = instantiate(catalog, "moe.topk", "bench", w.spec);
  std::vector<th_moe_expert_weights> experts;
  for (const ExpertWeights& e : w.layers[0].experts) experts.push_back({view(e.gate), view(e.up), view(e.down)});
  const size_t expert_bytes = size_t(experts[0].gate.nb[1]) * info.ffn_dim * 2 + size_t(experts[0].down.nb[1]) * info.dim;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);

  std::printf("%s: %u experts, %u per token, dim %u, expert width %u, %s; %zu compute threads\n\n", model_path.c_str(),
              info.n_experts, info.n_experts_used, info.dim, info.ffn_dim, quant::dtype_name(w.layers[0].experts[0].gate.type),
              compute_pool().threads());
  std::printf("| tokens | experts touched | grouped ms | per-token loop ms | grouped gain | grouped GB/s of expert weights |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (size_t batch : batches) {
    const uint32_t k = info.n_experts_used, dim = info.dim;
    std::vector<float> x(batch * dim), out(batch * dim), weights(batch * k, 1.0f / float(k));
    std::vector<int32_t> ids(batch * k);
    for (float& v : x) v = normal(rng);
    std::vector<char> touched(info.n_experts, 0);
    for (size_t t = 0; t < batch; ++t) {
      std::vector<int32_t> all(info.n_experts);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      std::copy_n(all.begin(), k, &ids[t * k]);
      for (uint32_t j = 0; j < k; ++j) touched[size_t(all[j])] = 1;
    }
    const size_t n_touched = size_t(std::count(touched.begin(), touched.end(), 1));
    auto call = [&](size_t first, size_t n) {
      th_moe_experts_args a{sizeof a, 0, uint32_t(n), dim, info.ffn_dim, info.n_experts, k, &x[first * dim], &ids[first * k],
                            &weights[first * k], experts.data(), nullptr, &out[first * dim]};
      th_error err;
      if (moe->call(&th_moe_vtable::experts, "experts", moe->handle(), &a, &err) != TH_OK) {
        std::fprintf(stderr, "experts() failed: %s\n", err.text().c_str());
        std::exit(1);
      }
    };
    auto grouped = [&] { call(0, batch); };
    auto per_token = [&] {
      for (size_t t = 0; t < batch; ++t) call(t, 1);
    };
    grouped(), per_token();  // warm: fault in the weights and buffers
    std::vector<double> g, p;
    for (int run = 0; run < runs; ++run) {
      for (int half = 0; half < 2; ++half) {
        const bool first_grouped = (run + half) % 2 == 0;
        const auto t0 = std::chrono::steady_clock::now();
        first_grouped ? grouped() : per_token();
        (first_grouped ? g : p).push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    const double gm = median(g), pm = median(p);
    std::printf("| %zu | %zu of %u | %.3f | %.3f | %.2fx | %.1f |\n", batch, n_touched, info.n_experts, gm, pm, pm / gm,
                double(n_touched * expert_bytes) / (gm * 1e6));
  }
  return 0;
}
