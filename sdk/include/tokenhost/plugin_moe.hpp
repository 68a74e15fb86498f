// tokenhost plugin SDK: softmax top-k gating and SwiGLU experts on the host's grouped products
// (C++17), what moe plugins that differ only in how they place experts have alike (moe.topk, moe.eplb).
//
// It adds no ABI of its own. What it gives:
//   - sdk::moe::Gating: the gating settings every such plugin takes (`weights`, `n_groups`,
//     `topk_groups`, `capacity_factor`, declared in its plugin.toml), read from a create()'s config,
//     and check_gating() for check();
//   - sdk::moe::gate(): softmax top-k, optionally group-limited, with a capacity per expert;
//   - sdk::moe::Experts: experts() as grouped products (th_host_api.grouped_matmul, ABI 1.10); its
//     buffers are taken per call from a free list, so that one instance takes the concurrent calls of
//     an engine's expert partitions.
// The plugin's README states the behaviour (moe.topk's is the reference text).
#ifndef TOKENHOST_PLUGIN_MOE_HPP
#define TOKENHOST_PLUGIN_MOE_HPP

#include <tokenhost/plugin.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tokenhost {
namespace sdk {
namespace moe {

// Names the dtypes a model may plausibly carry; others by number.
inline std::string type_name(th_dtype dtype) {
  static const struct {
    th_dtype dtype;
    const char* name;
  } kNames[] = {{TH_DTYPE_F32, "f32"},   {TH_DTYPE_F16, "f16"},   {TH_DTYPE_BF16, "bf16"},
                {TH_DTYPE_Q4_0, "q4_0"}, {TH_DTYPE_Q8_0, "q8_0"}, {TH_DTYPE_Q4_K, "q4_k"},
                {TH_DTYPE_Q6_K, "q6_k"}};
  for (const auto& n : kNames) {
    if (n.dtype == dtype) return n.name;
  }
  return "dtype " + std::to_string(dtype);
}

// The gating settings. prefix names the plugin in messages ("moe.topk").
struct Gating {
  bool normalize = true;                 // renormalize each token's top-k weights
  uint32_t n_groups = 1, topk_groups = 1;  // n_groups 1: every expert may be chosen
  double capacity_factor = 0;            // 0: no capacity

  Gating(const th_create_args& args) {
    const Config config(args.config);
    normalize = renormalizes(config.require_string("weights"), *args.model);
    n_groups = uint32_t(config.require_int("n_groups"));
    topk_groups = uint32_t(config.require_int("topk_groups"));
    capacity_factor = config.require_double("capacity_factor");
  }

  // The model's rule for each token's top-k weights, or the setting that overrides it.
  static bool renormalizes(const std::string& setting, const th_model_info& m) {
    if (setting == "normalized") return true;
    if (setting == "softmax") return false;
    const bool stated = TH_HAS_MEMBER(&m, th_model_info, expert_weights_norm) && m.expert_weights_norm != TH_EXPERT_WEIGHTS_UNSTATED;
    return !stated || m.expert_weights_norm == TH_EXPERT_WEIGHTS_NORMALIZED;  // a host before 1.10: Mixtral's rule
  }
};

// check()'s part for the gating settings and the model: TH_ERR_UNSUPPORTED with the reasons in err for a
// model these experts cannot serve; throws Error(TH_ERR_INVALID_ARGUMENT) for a bad setting.
inline th_status check_gating(const char* plugin, const th_check_query& query, th_error* err) {
  const std::string me = plugin;
  if (query.model == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, me + ": check() needs a model");
  const Config config(query.config);
  const std::string weights = config.require_string("weights");
  if (weights != "model" && weights != "normalized" && weights != "softmax")
    throw Error(TH_ERR_INVALID_ARGUMENT, me + ": weights = \"" + weights + "\": expected \"model\", \"normalized\" or \"softmax\"");
  const uint32_t groups = uint32_t(config.require_int("n_groups")), top_groups = uint32_t(config.require_int("topk_groups"));
  config.require_double("capacity_factor");
  const th_model_info& m = *query.model;
  th_status status = TH_OK;
  auto refuse = [&](const std::string& why) {
    set_error(err, me + ": " + why);
    status = TH_ERR_UNSUPPORTED;
  };
  if (m.n_experts == 0) {
    refuse("dense model: " + me + " needs n_experts > 0");
  } else if (m.n_experts_used == 0 || m.n_experts_used > m.n_experts) {
    refuse("n_experts_used (" + std::to_string(m.n_experts_used) + ") must lie in [1, n_experts = " + std::to_string(m.n_experts) + "]");
  }
  if (m.n_experts > 0 && groups > 1) {
    if (m.n_experts % groups != 0)
      refuse("n_groups = " + std::to_string(groups) + " does not divide the model's " + std::to_string(m.n_experts) + " experts");
    else if (top_groups > groups)
      refuse("topk_groups = " + std::to_string(top_groups) + " is more than n_groups = " + std::to_string(groups));
    else if (uint64_t(top_groups) * (m.n_experts / groups) < m.n_experts_used)
      refuse("topk_groups = " + std::to_string(top_groups) + " groups of " + std::to_string(m.n_experts / groups) +
             " experts hold fewer than the " + std::to_string(m.n_experts_used) + " experts each token uses");
  }
  if (type_name(m.weight_dtype).rfind("dtype ", 0) == 0)
    refuse("the host's kernels compute f32, f16, bf16, q8_0, q4_0, q4_k and q6_k experts, the model's weights are " +
           type_name(m.weight_dtype));
  if (query.device != nullptr && query.device->kind != TH_DEVICE_CPU) refuse("runs on the CPU only");
  return status;
}

// Softmax top-k gating of a.n_tokens tokens into a.expert_ids and a.expert_weights.
inline void gate(const char* plugin, const Gating& cfg, const th_moe_gate_args& a) {
  const std::string me = plugin;
  if (a.logits == nullptr || a.expert_ids == nullptr || a.expert_weights == nullptr)
    throw Error(TH_ERR_INVALID_ARGUMENT, me + ": gate() got a NULL argument");
  if (a.k == 0 || a.k > a.n_experts)
    throw Error(TH_ERR_INVALID_ARGUMENT,
                me + ": k (" + std::to_string(a.k) + ") must lie in [1, n_experts = " + std::to_string(a.n_experts) + "]");
  // Group-limited routing: the experts split into n_groups groups of consecutive ids; a token may only
  // use experts of its topk_groups groups whose best logit is highest (ties: the lower group).
  const bool grouped = cfg.n_groups > 1;
  if (grouped && (a.n_experts % cfg.n_groups != 0 || uint64_t(cfg.topk_groups) * (a.n_experts / cfg.n_groups) < a.k))
    throw Error(TH_ERR_INVALID_ARGUMENT, me + ": n_groups = " + std::to_string(cfg.n_groups) + " and topk_groups = " +
                                             std::to_string(cfg.topk_groups) + " do not fit " + std::to_string(a.n_experts) +
                                             " experts with k = " + std::to_string(a.k));
  const uint32_t group_size = grouped ? a.n_experts / cfg.n_groups : a.n_experts;
  std::vector<double> prob(a.n_experts), group_best(grouped ? cfg.n_groups : 0);
  std::vector<char> taken(a.n_experts), allowed(a.n_experts, 1), group_taken(group_best.size());
  for (uint32_t t = 0; t < a.n_tokens; ++t) {
    const float* logits = a.logits + size_t(t) * a.n_experts;
    const double max_logit = *std::max_element(logits, logits + a.n_experts);
    double sum = 0.0;
    for (uint32_t e = 0; e < a.n_experts; ++e) sum += prob[e] = std::exp(double(logits[e]) - max_logit);
    if (grouped) {
      for (uint32_t g = 0; g < cfg.n_groups; ++g)
        group_best[g] = *std::max_element(logits + g * group_size, logits + (g + 1) * group_size);
      std::fill(group_taken.begin(), group_taken.end(), 0);
      for (uint32_t j = 0; j < cfg.topk_groups; ++j) {
        int64_t best = -1;
        for (uint32_t g = 0; g < cfg.n_groups; ++g)
          if (!group_taken[g] && (best < 0 || group_best[g] > group_best[size_t(best)])) best = g;
        group_taken[size_t(best)] = 1;
      }
      for (uint32_t e = 0; e < a.n_experts; ++e) allowed[e] = group_taken[e / group_size];
    }
    // k passes of selection: the largest logit not yet taken, the lower id on ties.
    for (uint32_t e = 0; e < a.n_experts; ++e) taken[e] = !allowed[e];  // outside the token's groups: taken
    int32_t* ids = a.expert_ids + size_t(t) * a.k;
    double chosen = 0.0;
    for (uint32_t j = 0; j < a.k; ++j) {
      int64_t best = -1;
      for (uint32_t e = 0; e < a.n_experts; ++e) {
        if (!taken[e] && (best < 0 || logits[e] > logits[best])) best = e;
      }
      taken[size_t(best)] = 1;
      ids[j] = int32_t(best);
      chosen += prob[size_t(best)];
    }
    float* weights = a.expert_weights + size_t(t) * a.k;
    for (uint32_t j = 0; j < a.k; ++j) weights[j] = float(prob[size_t(ids[j])] / (cfg.normalize ? chosen : sum));
  }
  // Capacity: each expert takes at most ceil(capacity_factor * n_tokens * k / n_experts) of this call's
  // choices, the earlier tokens first; a choice past it is dropped (its weight 0: the expert does not
  // compute for that token, whose other choices keep their weights).
  if (cfg.capacity_factor > 0) {
    const uint64_t capacity = uint64_t(std::ceil(cfg.capacity_factor * double(a.n_tokens) * a.k / a.n_experts));
    std::vector<uint64_t> load(a.n_experts, 0);
    for (size_t i = 0; i < size_t(a.n_tokens) * a.k; ++i)
      if (load[size_t(a.expert_ids[i])]++ >= capacity) a.expert_weights[i] = 0.0f;
  }
}

// The routed experts as grouped products on the host's kernels: the (token, choice) pairs ordered by
// expert, gate and up of every expert in one call (each expert's weights read once for all of its
// tokens), SwiGLU, down in a second call, then each token's rows summed with their weights in expert
// order (a token's sum does not depend on the other tokens of the step).
class Experts {
 public:
  Experts(const char* plugin, th_host_ctx* ctx) : plugin_(plugin), ctx_(ctx) {}

  void compute(const th_moe_experts_args* args, th_error* err) {
    if (args == nullptr || args->x == nullptr || args->expert_ids == nullptr || args->expert_weights == nullptr ||
        args->experts == nullptr || args->out == nullptr)
      invalid("experts() got a NULL argument");
    const Lease lease(*this);
    run(*args, *lease.buffers, err);
  }

 private:
  // One call's buffers, kept between calls: the routed rows by expert, their tokens and weights, the
  // rows' inputs, gate and up outputs (then the SwiGLU activations), and down outputs.
  struct Buffers {
    std::vector<uint32_t> row_begin, row_token, next, token_rows;
    std::vector<float> row_weight, xs, gate_out, up_out, down_out, shared_out;
    std::vector<th_tensor> weights;
  };
  // Buffers for the length of one call: concurrent calls (an engine's expert partitions) take distinct ones.
  struct Lease {
    explicit Lease(Experts& owner) : owner(owner) {
      std::lock_guard lock(owner.mutex_);
      if (owner.free_.empty()) {
        buffers = std::make_unique<Buffers>();
      } else {
        buffers = std::move(owner.free_.back());
        owner.free_.pop_back();
      }
    }
    ~Lease() {
      std::lock_guard lock(owner.mutex_);
      owner.free_.push_back(std::move(buffers));
    }
    Experts& owner;
    std::unique_ptr<Buffers> buffers;
  };

  [[noreturn]] void invalid(const std::string& why) const { throw Error(TH_ERR_INVALID_ARGUMENT, plugin_ + ": " + why); }

  // f(begin, end) over [0, n) items of `width` floats each: on the host's compute threads when there is
  // enough to split (a prefill's rows), else here (a decode step's few).
  template <class F>
  void for_items(size_t n, size_t width, F&& f) const {
    if (n * width < 32768) return f(size_t(0), n);
    parallel_for(ctx_, n, 0, 0, f);
  }

  th_tensor checked(const th_tensor& t, const std::string& what) const {
    if (t.data == nullptr) invalid(what + " has no data");
    return t;
  }

  void run(const th_moe_experts_args& a, Buffers& b, th_error* err) const {
    const size_t choices = size_t(a.n_tokens) * a.k;
    std::vector<uint32_t>& begin = b.row_begin;
    begin.assign(size_t(a.n_experts) + 1, 0);
    for (size_t i = 0; i < choices; ++i) {
      const int32_t e = a.expert_ids[i];
      if (e < 0 || uint32_t(e) >= a.n_experts)
        invalid("expert id " + std::to_string(e) + " is out of range [0, " + std::to_string(a.n_experts) + ")");
      if (a.expert_weights[i] != 0.0f) ++begin[size_t(e) + 1];  // weight 0: not computed
    }
    for (uint32_t e = 0; e < a.n_experts; ++e) begin[e + 1] += begin[e];
    const size_t rows = begin[a.n_experts];
    b.row_token.resize(rows);
    b.row_weight.resize(rows);
    b.xs.resize(rows * a.dim);
    b.next.assign(begin.begin(), begin.end() - 1);
    // token_rows[t * k + j]: the rows of token t (its choice j's, in choice order; rows past its
    // computed choices: kNone), which its sum below visits in row order, that is expert order.
    constexpr uint32_t kNone = ~0u;
    b.token_rows.assign(choices, kNone);
    for (uint32_t t = 0; t < a.n_tokens; ++t)
      for (uint32_t j = 0, used = 0; j < a.k; ++j) {
        const size_t i = size_t(t) * a.k + j;
        if (a.expert_weights[i] == 0.0f) continue;
        const uint32_t r = b.next[size_t(a.expert_ids[i])]++;
        b.row_token[r] = t;
        b.row_weight[r] = a.expert_weights[i];
        b.token_rows[size_t(t) * a.k + used++] = r;
      }
    for_items(rows, a.dim, [&](size_t r0, size_t r1) {
      for (size_t r = r0; r < r1; ++r) std::copy_n(a.x + size_t(b.row_token[r]) * a.dim, a.dim, &b.xs[r * a.dim]);
    });
    auto product = [&](const std::vector<uint32_t>& row_begin, uint32_t n_groups, uint32_t cols, const float* x,
                       std::initializer_list<float*> y) {
      th_grouped_matmul_args g{sizeof g, n_groups, uint32_t(y.size()), cols, b.weights.data(), row_begin.data(), x, y.begin()};
      if (th_status s = host().grouped_matmul(ctx_, &g, err)) throw Error(s, plugin_ + ": the host's grouped product failed");
    };
    // down(silu(gate x) * up x) of n rows of x through the weights' n_groups groups, into y.
    auto swiglu = [&](const std::vector<uint32_t>& row_begin, uint32_t n_groups, const float* x, size_t n, size_t width,
                      const std::vector<th_tensor>& gate_up, const std::vector<th_tensor>& down, std::vector<float>& y) {
      b.gate_out.resize(n * width);
      b.up_out.resize(n * width);
      b.weights = gate_up;
      product(row_begin, n_groups, a.dim, x, {b.gate_out.data(), b.up_out.data()});
      for_items(n, width, [&](size_t r0, size_t r1) {
        for (size_t i = r0 * width; i < r1 * width; ++i) {
          const float g = b.gate_out[i];
          b.gate_out[i] = g / (1.0f + std::exp(-g)) * b.up_out[i];
        }
      });
      b.weights = down;
      y.resize(n * a.dim);
      product(row_begin, n_groups, uint32_t(width), b.gate_out.data(), {y.data()});
    };
    if (rows > 0) {
      std::vector<th_tensor> gate_up, down;
      for (uint32_t e = 0; e < a.n_experts; ++e) {
        const std::string what = "expert " + std::to_string(e);
        gate_up.push_back(checked(a.experts[e].gate, what + " gate"));
        gate_up.push_back(checked(a.experts[e].up, what + " up"));
        down.push_back(checked(a.experts[e].down, what + " down"));
      }
      swiglu(begin, a.n_experts, b.xs.data(), rows, a.ffn_dim, gate_up, down, b.down_out);
    }
    if (a.shared_expert != nullptr && a.n_tokens > 0) {  // every token, weight 1: one group
      const th_moe_expert_weights& sh = *a.shared_expert;
      swiglu({0, a.n_tokens}, 1, a.x, a.n_tokens, size_t(sh.gate.ne[1]),
             {checked(sh.gate, "shared expert gate"), checked(sh.up, "shared expert up")}, {checked(sh.down, "shared expert down")},
             b.shared_out);
    }
    // Written only now: a product refused above leaves out as it was. Each token's rows in row order.
    for_items(a.n_tokens, size_t(a.k) * a.dim, [&](size_t t0, size_t t1) {
      std::vector<uint32_t> mine(a.k);
      for (size_t t = t0; t < t1; ++t) {
        float* out = a.out + t * a.dim;
        if (a.shared_expert != nullptr) std::copy_n(&b.shared_out[t * a.dim], a.dim, out);
        else std::fill(out, out + a.dim, 0.0f);
        size_t n = 0;  // its rows, sorted (k is small: an insertion sort)
        for (size_t j = 0; j < a.k && b.token_rows[t * a.k + j] != kNone; ++j) {
          const uint32_t r = b.token_rows[t * a.k + j];
          size_t at = n++;
          for (; at > 0 && mine[at - 1] > r; --at) mine[at] = mine[at - 1];
          mine[at] = r;
        }
        for (size_t i = 0; i < n; ++i) {
          const float* d = &b.down_out[size_t(mine[i]) * a.dim];
          const float w = b.row_weight[mine[i]];
          for (uint32_t c = 0; c < a.dim; ++c) out[c] += w * d[c];
        }
      }
    });
  }

  std::string plugin_;
  th_host_ctx* ctx_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Buffers>> free_;
};

}  // namespace moe
}  // namespace sdk
}  // namespace tokenhost

#endif  // TOKENHOST_PLUGIN_MOE_HPP
