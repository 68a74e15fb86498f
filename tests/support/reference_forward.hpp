// A float64, plain-loop forward pass of one sequence through a Llama-family model: dense or MoE, with
// or without a (gated) shared expert, RoPE in either layout, QKV biases. The oracle the runtime's
// forward_step is checked against; written from the model's definition, sharing no code with it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "model/quant.hpp"
#include "base/model_weights.hpp"

namespace tokenhost::testing {

using Vec = std::vector<double>;

// A weight matrix dequantized to double.
struct RefMatrix {
  size_t rows = 0, cols = 0;
  Vec v;
  explicit RefMatrix(const WeightView& w) : rows(size_t(w.rows)), cols(size_t(w.cols)), v(rows * cols) {
    std::vector<float> row(cols);
    for (size_t r = 0; r < rows; ++r) {
      quant::dequantize_row(w.type, w.row(int64_t(r)), row.data(), int64_t(cols));
      std::copy(row.begin(), row.end(), v.begin() + long(r * cols));
    }
  }
  Vec operator*(const Vec& x) const {
    Vec y(rows, 0.0);
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) y[r] += v[r * cols + c] * x[c];
    return y;
  }
};

struct ReferenceOutput {
  Vec logits;  // of the last position
  Vec mean_hidden;  // the mean over positions of the final hidden state after the output norm (embeddings)
  // The smallest gap, over every token and MoE layer, between the router logits of the last expert
  // chosen and the first one left out: where it is tiny, float rounding may choose otherwise.
  double router_margin = std::numeric_limits<double>::infinity();
};

namespace detail {

inline Vec rmsnorm(const Vec& x, const WeightView& weight, double eps) {
  double ss = 0;
  for (double a : x) ss += a * a;
  const double scale = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  const RefMatrix w(weight);
  Vec out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * scale * w.v[i];
  return out;
}

// Head h (hd values from h * hd) of v, RMS-normed with weight in place.
inline void head_rmsnorm(Vec& v, size_t h, size_t hd, const WeightView& weight, double eps) {
  const Vec head(v.begin() + long(h * hd), v.begin() + long((h + 1) * hd));
  const Vec normed = rmsnorm(head, weight, eps);
  std::copy(normed.begin(), normed.end(), v.begin() + long(h * hd));
}

inline void add_bias(Vec& y, const WeightView& b) {
  if (b.empty()) return;
  const RefMatrix m(b);
  for (size_t i = 0; i < y.size(); ++i) y[i] += m.v[i];
}

inline void rope(Vec& v, size_t n_heads, size_t head_dim, size_t pos, const RopeSettings& r) {
  for (size_t h = 0; h < n_heads; ++h)
    for (size_t i = 0; i < head_dim / 2; ++i) {
      const double angle = double(pos) * double(r.freq_scale) * std::pow(double(r.theta), -2.0 * double(i) / double(head_dim));
      const size_t a = h * head_dim + (r.neox ? i : 2 * i), b = h * head_dim + (r.neox ? i + head_dim / 2 : 2 * i + 1);
      const double x0 = v[a], x1 = v[b];
      v[a] = x0 * std::cos(angle) - x1 * std::sin(angle);
      v[b] = x0 * std::sin(angle) + x1 * std::cos(angle);
    }
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// down(silu(gate x) * up x)
inline Vec swiglu(const ExpertWeights& e, const Vec& x) {
  Vec g = RefMatrix(e.gate) * x;
  const Vec u = RefMatrix(e.up) * x;
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] * sigmoid(g[i]) * u[i];
  return RefMatrix(e.down) * g;
}

}  // namespace detail

// The logits after tokens (positions 0, 1, ...). MoE gating as moe.topk defines it: softmax over the
// router logits, the k most probable experts (ties: the lower id), their probabilities renormalized to
// sum to 1 when normalize; the shared expert, when there is one, added with weight 1 or, gated, with
// sigmoid(gate . x).
inline ReferenceOutput reference_forward(const ModelWeights& w, const std::vector<int32_t>& tokens, bool normalize = true) {
  using namespace detail;
  const auto& info = w.spec.info;
  const size_t n = tokens.size(), dim = info.dim, hd = info.head_dim, nh = info.n_heads, nkv = info.n_kv_heads;
  ReferenceOutput out;
  std::vector<Vec> x(n, Vec(dim));
  const RefMatrix embed(w.embed);
  for (size_t t = 0; t < n; ++t)
    std::copy_n(embed.v.begin() + long(size_t(tokens[t]) * dim), dim, x[t].begin());

  for (const LayerWeights& L : w.layers) {
    const RefMatrix wq(L.wq), wk(L.wk), wv(L.wv), wo(L.wo);
    std::vector<Vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const Vec xn = rmsnorm(x[t], L.attn_norm, w.rms_eps);
      q[t] = wq * xn;
      k[t] = wk * xn;
      v[t] = wv * xn;
      add_bias(q[t], L.bq);
      add_bias(k[t], L.bk);
      add_bias(v[t], L.bv);
      if (!L.q_norm.empty()) {  // Qwen3: per-head RMS norms of the queries and keys
        for (size_t h = 0; h < nh; ++h) head_rmsnorm(q[t], h, hd, L.q_norm, w.rms_eps);
        for (size_t h = 0; h < nkv; ++h) head_rmsnorm(k[t], h, hd, L.k_norm, w.rms_eps);
      }
      rope(q[t], nh, hd, t, w.rope);
      rope(k[t], nkv, hd, t, w.rope);
    }
    for (size_t t = 0; t < n; ++t) {  // causal attention, query head h reading KV head h / (nh / nkv)
      Vec att(nh * hd, 0.0);
      for (size_t h = 0; h < nh; ++h) {
        const size_t kvh = h / (nh / nkv);
        Vec score(t + 1);
        for (size_t s = 0; s <= t; ++s) {
          double dot = 0;
          for (size_t d = 0; d < hd; ++d) dot += q[t][h * hd + d] * k[s][kvh * hd + d];
          score[s] = dot / std::sqrt(double(hd));
        }
        const double top = *std::max_element(score.begin(), score.end());
        double sum = 0;
        for (double& s : score) sum += (s = std::exp(s - top));
        for (size_t s = 0; s <= t; ++s)
          for (size_t d = 0; d < hd; ++d) att[h * hd + d] += score[s] / sum * v[s][kvh * hd + d];
      }
      const Vec o = wo * att;
      for (size_t i = 0; i < dim; ++i) x[t][i] += o[i];
    }
    for (size_t t = 0; t < n; ++t) {
      const Vec xn = rmsnorm(x[t], L.ffn_norm, w.rms_eps);
      Vec ffn(dim, 0.0);
      if (info.n_experts == 0) {
        ffn = swiglu(L.experts[0], xn);
      } else {
        const Vec logits = RefMatrix(L.router) * xn;
        std::vector<size_t> order(logits.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
        const size_t kk = info.n_experts_used;
        if (kk < order.size()) out.router_margin = std::min(out.router_margin, logits[order[kk - 1]] - logits[order[kk]]);
        double total = 0, chosen = 0;
        for (double l : logits) total += std::exp(l - logits[order[0]]);
        for (size_t j = 0; j < kk; ++j) chosen += std::exp(logits[order[j]] - logits[order[0]]);
        for (size_t j = 0; j < kk; ++j) {
          const double weight = std::exp(logits[order[j]] - logits[order[0]]) / (normalize ? chosen : total);
          const Vec e = swiglu(L.experts[order[j]], xn);
          for (size_t i = 0; i < dim; ++i) ffn[i] += weight * e[i];
        }
      }
      if (!L.shared_expert.empty()) {
        const double scale = L.shared_expert_gate.empty() ? 1.0 : sigmoid((RefMatrix(L.shared_expert_gate) * xn)[0]);
        const Vec s = swiglu(L.shared_expert, xn);
        for (size_t i = 0; i < dim; ++i) ffn[i] += scale * s[i];
      }
      for (size_t i = 0; i < dim; ++i) x[t][i] += ffn[i];
    }
  }
  out.logits = RefMatrix(w.output) * rmsnorm(x[n - 1], w.out_norm, w.rms_eps);
  out.mean_hidden.assign(dim, 0.0);
  for (size_t t = 0; t < n; ++t) {
    const Vec h = rmsnorm(x[t], w.out_norm, w.rms_eps);
    for (size_t d = 0; d < dim; ++d) out.mean_hidden[d] += h[d] / double(n);
  }
  return out;
}

}  // namespace tokenhost::testing
