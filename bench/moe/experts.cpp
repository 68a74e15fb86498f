// bench_moe_experts: one MoE layer's routed experts for B tokens at once (moe.topk on the host's grouped
// products: each expert's weights read once for all of its tokens) against the same B tokens one call
// each (a loop over tokens: each token reads its experts' weights again), side by side, alternating,
// median of --runs. The experts are layer 0's of a GGUF model (make-model writes Mixtral- and
// Qwen-MoE-shaped ones); routing is uniform at random, k distinct experts per token.
//   bench_moe_experts --model M.gguf [--batches 1,8,64] [--runs 7]
// With --partitions N (expert parallelism, plugin/expert_partitions.hpp): routing skewed instead (expert
// e drawn with weight 1/(e+1)^skew, so the hot experts are the low ids, which the engine's start places
// on the first partition), and the same tokens through one call on the process-wide pool, through N
// partitions of one thread each (pinned to cores 0..N-1) in the start placement, and through N partitions
// in moe.eplb's placement for that load (--replicas spare slots): step time and imbalance figure.
//   bench_moe_experts --model M.gguf --partitions 2 [--replicas 2] [--skew 1.2] [--batches 8,64,256]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "base/compute_pool.hpp"
#include "model/quant.hpp"
#include "plugin/catalog.hpp"
#include "plugin/expert_partitions.hpp"
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

// Routed choices of `batch` tokens: k distinct experts each, expert e drawn with weight 1/(e+1)^skew.
void skewed_choices(std::mt19937_64& rng, size_t batch, uint32_t n_experts, uint32_t k, double skew, std::vector<int32_t>& ids) {
  std::vector<double> weight(n_experts);
  for (uint32_t e = 0; e < n_experts; ++e) weight[e] = 1.0 / std::pow(double(e + 1), skew);
  ids.resize(batch * k);
  for (size_t t = 0; t < batch; ++t) {
    std::vector<double> w = weight;
    for (uint32_t j = 0; j < k; ++j) {
      const int32_t e = int32_t(std::discrete_distribution<int32_t>(w.begin(), w.end())(rng));
      ids[t * k + j] = e;
      w[size_t(e)] = 0;  // distinct
    }
  }
}

// One call on the process-wide pool against N partitions in the start placement and in moe.eplb's.
int bench_partitions(const ModelWeights& w, const std::vector<th_moe_expert_weights>& experts, PluginCatalog& catalog,
                     const std::vector<size_t>& batches, int runs, uint32_t n_partitions, uint32_t replicas, double skew) {
  const th_model_info& info = w.spec.info;
  auto moe = instantiate(catalog, "moe.eplb", "bench", w.spec, toml::table{{"min_improvement", 0.0}});
  const uint32_t slots = (info.n_experts + replicas + n_partitions - 1) / n_partitions;
  auto partitions = [&] {
    std::vector<std::shared_ptr<ComputePool>> pools;
    std::vector<std::string> names;
    for (uint32_t p = 0; p < n_partitions; ++p) {
      pools.push_back(std::make_shared<ComputePool>(1, std::vector<int>{int(p % std::max(1u, std::thread::hardware_concurrency()))}));
      names.push_back("p" + std::to_string(p));
    }
    return std::make_unique<ExpertPartitions>(pools, names, 1, info.n_experts, slots);
  };
  auto start = partitions(), balanced = partitions();
  std::printf("%u partitions of 1 thread (pinned to cores 0..%u), %u slots each (%u replicas), routing skew %.2f; "
              "one call: the process-wide pool of %zu threads\n\n",
              n_partitions, n_partitions - 1, slots, replicas, skew, process_compute_pool().threads());
  std::printf("| tokens | one call ms | start: step ms | imbalance | partitions busy ms | eplb: step ms | imbalance | partitions busy ms | eplb gain over start |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t batch : batches) {
    const uint32_t k = info.n_experts_used, dim = info.dim;
    std::vector<float> x(batch * dim), out(batch * dim), weights(batch * k, 1.0f / float(k));
    std::vector<int32_t> ids;
    for (float& v : x) v = normal(rng);
    skewed_choices(rng, batch, info.n_experts, k, skew, ids);
    std::vector<uint64_t> tokens(info.n_experts, 0);
    for (int32_t e : ids) ++tokens[size_t(e)];
    // moe.eplb's plan for this load, from the start placement.
    auto fresh = partitions();
    const RebalanceOutcome plan = fresh->rebalance(*moe, 0, tokens);
    if (!plan.error.empty()) {
      std::fprintf(stderr, "rebalance: %s\n", plan.error.c_str());
      return 1;
    }
    if (balanced->placement().set_slots(0, fresh->placement().slots(0)) != "") return 1;
    const th_moe_experts_args a{sizeof a, 0, uint32_t(batch), dim, info.ffn_dim, info.n_experts, k, x.data(), ids.data(),
                                weights.data(), experts.data(), nullptr, out.data()};
    auto one = [&] {
      th_error err;
      if (moe->call(&th_moe_vtable::experts, "experts", moe->handle(), &a, &err) != TH_OK) {
        std::fprintf(stderr, "experts() failed: %s\n", err.text().c_str());
        std::exit(1);
      }
    };
    auto over = [&](ExpertPartitions& p) { p.experts(*moe, a); };
    const std::function<void()> halves[3] = {one, [&] { over(*start); }, [&] { over(*balanced); }};
    for (const auto& h : halves) h();  // warm
    const std::vector<double> start_before = start->total_seconds(), balanced_before = balanced->total_seconds();
    std::vector<double> ms[3];
    for (int run = 0; run < runs; ++run)
      for (int i = 0; i < 3; ++i) {  // rotating order
        const int which = (run + i) % 3;
        const auto t0 = std::chrono::steady_clock::now();
        halves[which]();
        ms[which].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    const double m0 = median(ms[0]), m1 = median(ms[1]), m2 = median(ms[2]);
    // Mean busy time per call of each partition (the busiest is the step's straggler).
    auto busy = [&](const ExpertPartitions& p, const std::vector<double>& before) {
      std::string s;
      for (size_t i = 0; i < before.size(); ++i) {
        char text[32];
        std::snprintf(text, sizeof text, "%s%.2f", i ? " / " : "", (p.total_seconds()[i] - before[i]) * 1e3 / (runs + 0.0));
        s += text;
      }
      return s;
    };
    std::printf("| %zu | %.3f | %.3f | %.2f | %s | %.3f | %.2f | %s | %.2fx |\n", batch, m0, m1, start->placement().imbalance(0, tokens),
                busy(*start, start_before).c_str(), m2, balanced->placement().imbalance(0, tokens), busy(*balanced, balanced_before).c_str(),
                m1 / m2);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One MoE layer's experts for a batch of tokens: grouped by expert against a loop over tokens"};
  std::string model_path;
  std::vector<size_t> batches = {1, 8, 64};
  int runs = 7;
  uint32_t n_partitions = 0, replicas = 2;
  double skew = 1.2;
  app.add_option("--model", model_path, "GGUF MoE model")->required();
  app.add_option("--partitions", n_partitions, "Expert parallelism over this many partitions (skewed routing) instead");
  app.add_option("--replicas", replicas, "With --partitions: spare expert slots for moe.eplb's replicas");
  app.add_option("--skew", skew, "With --partitions: expert e is drawn with weight 1/(e+1)^skew");
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
  if (n_partitions > 0) {
    if (n_partitions < 2 || n_partitions > info.n_experts) {
      std::fprintf(stderr, "--partitions must lie in [2, %u]\n", info.n_experts);
      return 2;
    }
    std::printf("%s: %u experts, %u per token, dim %u, expert width %u, %s\n", model_path.c_str(), info.n_experts,
                info.n_experts_used, info.dim, info.ffn_dim, quant::dtype_name(w.layers[0].experts[0].gate.type));
    return bench_partitions(w, experts, catalog, batches, runs, n_partitions, replicas, skew);
  }
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
