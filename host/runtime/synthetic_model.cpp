#include "runtime/synthetic_model.hpp"

#include <cmath>
#include <deque>
#include <random>

namespace tokenhost {
namespace {

// Owns the generated arrays; the views of ModelWeights point into them.
struct SyntheticStorage {
  std::deque<std::vector<float>> arrays;  // a deque: adding one never moves the others
  std::mt19937_64 rng;

  WeightView matrix(int64_t rows, int64_t cols, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    auto& v = arrays.emplace_back(size_t(rows * cols));
    for (auto& x : v) x = dist(rng);
    return f32_view(v, rows, cols);
  }
  WeightView norm(int64_t n) {
    std::uniform_real_distribution<float> dist(0.8f, 1.2f);
    auto& v = arrays.emplace_back(size_t(n));
    for (auto& x : v) x = dist(rng);
    return f32_view(v, 1, n);
  }
};

}  // namespace

std::shared_ptr<const ModelWeights> make_synthetic_weights(const ModelSpec& spec, uint64_t seed) {
  auto storage = std::make_shared<SyntheticStorage>();
  storage->rng.seed(seed);
  auto w = std::make_shared<ModelWeights>();
  w->spec = spec;
  const auto& i = spec.info;
  const int64_t dim = i.dim, kv = int64_t(i.n_kv_heads) * i.head_dim, q = int64_t(i.n_heads) * i.head_dim;
  SyntheticStorage& s = *storage;
  w->embed = s.matrix(i.vocab_size, dim, 1.0f);
  w->out_norm = s.norm(dim);
  w->output = s.matrix(i.vocab_size, dim, 0.05f);
  const float in_scale = 1.0f / std::sqrt(float(dim));
  for (uint32_t l = 0; l < i.n_layers; ++l) {
    LayerWeights layer;
    layer.attn_norm = s.norm(dim);
    layer.ffn_norm = s.norm(dim);
    layer.wq = s.matrix(q, dim, in_scale);
    layer.wk = s.matrix(kv, dim, in_scale);
    layer.wv = s.matrix(kv, dim, in_scale);
    layer.wo = s.matrix(dim, q, 1.0f / std::sqrt(float(q)));
    if (i.n_experts > 0) layer.router = s.matrix(i.n_experts, dim, in_scale);
    for (uint32_t e = 0; e < std::max<uint32_t>(i.n_experts, 1); ++e) {
      layer.experts.push_back({s.matrix(i.ffn_dim, dim, in_scale), s.matrix(i.ffn_dim, dim, in_scale),
                               s.matrix(dim, i.ffn_dim, 1.0f / std::sqrt(float(i.ffn_dim)))});
    }
    w->layers.push_back(std::move(layer));
  }
  for (const auto& a : s.arrays) w->bytes += a.size() * sizeof(float);
  w->storage = storage;
  return w;
}

}  // namespace tokenhost
