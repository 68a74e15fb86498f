// moe.topk: softmax top-k gating (optionally group-limited, DeepSeek's node-limited routing, and with a
// capacity per expert past which tokens are dropped), SwiGLU experts of any weight type the host's
// kernels take through its grouped products (th_host_api.grouped_matmul), and greedy (LPT) expert
// placement.
#include <tokenhost/plugin.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

void invalid(const std::string& why) { throw Error(TH_ERR_INVALID_ARGUMENT, "moe.topk: " + why); }

// Names the dtypes a model may plausibly carry; others by number.
std::string type_name(th_dtype dtype) {
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

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&]() -> th_status {
    if (query == nullptr || query->model == nullptr) invalid("check() needs a model");
    const sdk::Config config(query->config);
    const std::string weights = config.require_string("weights");
    if (weights != "model" && weights != "normalized" && weights != "softmax")
      invalid("weights = \"" + weights + "\": expected \"model\", \"normalized\" or \"softmax\"");
    const uint32_t groups = uint32_t(config.require_int("n_groups")), top_groups = uint32_t(config.require_int("topk_groups"));
    config.require_double("capacity_factor");
    const th_model_info& m = *query->model;
    th_status status = TH_OK;
    auto refuse = [&](const std::string& why) {
      sdk::set_error(err, "moe.topk: " + why);
      status = TH_ERR_UNSUPPORTED;
    };
    if (m.n_experts == 0) {
      refuse("dense model: moe.topk needs n_experts > 0");
    } else if (m.n_experts_used == 0 || m.n_experts_used > m.n_experts) {
      refuse("n_experts_used (" + std::to_string(m.n_experts_used) + ") must lie in [1, n_experts = " +
             std::to_string(m.n_experts) + "]");
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
    if (type_name(m.weight_dtype).rfind("dtype ", 0) == 0) {
      refuse("the host's kernels compute f32, f16, bf16, q8_0, q4_0, q4_k and q6_k experts, the model's weights are " +
             type_name(m.weight_dtype));
    }
    if (query->device != nullptr && query->device->kind != TH_DEVICE_CPU) refuse("runs on the CPU only");
    return status;
  });
}

// The model's rule for each token's top-k weights, or the setting that overrides it.
bool renormalizes(const std::string& setting, const th_model_info& m) {
  if (setting == "normalized") return true;
  if (setting == "softmax") return false;
  const bool stated = TH_HAS_MEMBER(&m, th_model_info, expert_weights_norm) && m.expert_weights_norm != TH_EXPERT_WEIGHTS_UNSTATED;
  return !stated || m.expert_weights_norm == TH_EXPERT_WEIGHTS_NORMALIZED;  // a host before 1.10: Mixtral's rule
}

struct TopK {
  explicit TopK(const th_create_args& args) : ctx(args.host_ctx) {
    const sdk::Config config(args.config);
    normalize = renormalizes(config.require_string("weights"), *args.model);
    n_groups = uint32_t(config.require_int("n_groups"));
    topk_groups = uint32_t(config.require_int("topk_groups"));
    capacity_factor = config.require_double("capacity_factor");
  }
  th_host_ctx* ctx;
  bool normalize;
  uint32_t n_groups, topk_groups;  // n_groups 1: every expert may be chosen
  double capacity_factor;          // 0: no capacity
  // experts()'s buffers, kept between calls: the routed rows by expert, their tokens and weights, the
  // rows' inputs, gate and up outputs (then the SwiGLU activations), and down outputs.
  std::vector<uint32_t> row_begin, row_token;
  std::vector<float> row_weight, xs, gate_out, up_out, down_out, shared_out;
  std::vector<th_tensor> weights;
};

th_status gate(th_instance* instance, const th_moe_gate_args* args, th_error* err) {
  return sdk::guard(err, [&] {
    const TopK& cfg = sdk::self<TopK>(instance);
    const bool normalize = cfg.normalize;
    if (args == nullptr || args->logits == nullptr || args->expert_ids == nullptr || args->expert_weights == nullptr) {
      invalid("gate() got a NULL argument");
    }
    const th_moe_gate_args& a = *args;
    if (a.k == 0 || a.k > a.n_experts) {
      invalid("k (" + std::to_string(a.k) + ") must lie in [1, n_experts = " + std::to_string(a.n_experts) + "]");
    }
    // Group-limited routing: the experts split into n_groups groups of consecutive ids; a token may only
    // use experts of its topk_groups groups whose best logit is highest (ties: the lower group).
    const bool grouped = cfg.n_groups > 1;
    if (grouped && (a.n_experts % cfg.n_groups != 0 || uint64_t(cfg.topk_groups) * (a.n_experts / cfg.n_groups) < a.k))
      invalid("n_groups = " + std::to_string(cfg.n_groups) + " and topk_groups = " + std::to_string(cfg.topk_groups) +
              " do not fit " + std::to_string(a.n_experts) + " experts with k = " + std::to_string(a.k));
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
      std::copy(allowed.begin(), allowed.end(), taken.begin());
      for (auto& t : taken) t = !t;  // an expert outside the token's groups counts as taken
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
      for (uint32_t j = 0; j < a.k; ++j) {
        weights[j] = float(prob[size_t(ids[j])] / (normalize ? chosen : sum));
      }
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
  });
}

// An expert's matrix as the host's grouped product takes it.
th_tensor checked(const th_tensor& t, const std::string& what) {
  if (t.data == nullptr) invalid(what + " has no data");
  return t;
}

// The routed experts as grouped products on the host's kernels: the (token, choice) pairs ordered by
// expert, gate and up of every expert in one call (each expert's weights read once for all of its
// tokens), SwiGLU, down in a second call, then each token's rows summed with their weights in expert
// order (a token's sum does not depend on the other tokens of the step).
th_status experts(th_instance* instance, const th_moe_experts_args* args, th_error* err) {
  return sdk::guard(err, [&] {
    TopK& self = sdk::self<TopK>(instance);
    if (args == nullptr || args->x == nullptr || args->expert_ids == nullptr || args->expert_weights == nullptr ||
        args->experts == nullptr || args->out == nullptr) {
      invalid("experts() got a NULL argument");
    }
    const th_moe_experts_args& a = *args;
    const size_t choices = size_t(a.n_tokens) * a.k;
    std::vector<uint32_t>& begin = self.row_begin;
    begin.assign(size_t(a.n_experts) + 1, 0);
    for (size_t i = 0; i < choices; ++i) {
      const int32_t e = a.expert_ids[i];
      if (e < 0 || uint32_t(e) >= a.n_experts) {
        invalid("expert id " + std::to_string(e) + " is out of range [0, " + std::to_string(a.n_experts) + ")");
      }
      if (a.expert_weights[i] != 0.0f) ++begin[size_t(e) + 1];  // weight 0: dropped past the expert's capacity
    }
    for (uint32_t e = 0; e < a.n_experts; ++e) begin[e + 1] += begin[e];
    const size_t rows = begin[a.n_experts];
    self.row_token.resize(rows);
    self.row_weight.resize(rows);
    self.xs.resize(rows * a.dim);
    std::vector<uint32_t> next(begin.begin(), begin.end() - 1);
    for (uint32_t t = 0; t < a.n_tokens; ++t)
      for (uint32_t j = 0; j < a.k; ++j) {
        const size_t i = size_t(t) * a.k + j;
        if (a.expert_weights[i] == 0.0f) continue;
        const uint32_t r = next[size_t(a.expert_ids[i])]++;
        self.row_token[r] = t;
        self.row_weight[r] = a.expert_weights[i];
        std::copy_n(a.x + size_t(t) * a.dim, a.dim, &self.xs[size_t(r) * a.dim]);
      }
    auto run = [&](const std::vector<uint32_t>& row_begin, uint32_t n_groups, uint32_t cols, const float* x,
                   std::initializer_list<float*> y) {
      th_grouped_matmul_args g{sizeof g, n_groups, uint32_t(y.size()), cols, self.weights.data(), row_begin.data(), x,
                               y.begin()};
      if (th_status s = sdk::host().grouped_matmul(self.ctx, &g, err)) throw Error(s, "moe.topk: the host's grouped product failed");
    };
    // down(silu(gate x) * up x) of n rows of x through the weights' n_groups groups, into y.
    auto swiglu = [&](const std::vector<uint32_t>& row_begin, uint32_t n_groups, const float* x, size_t n, size_t width,
                      const std::vector<th_tensor>& gate_up, const std::vector<th_tensor>& down, std::vector<float>& y) {
      self.gate_out.resize(n * width);
      self.up_out.resize(n * width);
      self.weights = gate_up;
      run(row_begin, n_groups, a.dim, x, {self.gate_out.data(), self.up_out.data()});
      for (size_t i = 0; i < n * width; ++i) {
        const float g = self.gate_out[i];
        self.gate_out[i] = g / (1.0f + std::exp(-g)) * self.up_out[i];
      }
      self.weights = down;
      y.resize(n * a.dim);
      run(row_begin, n_groups, uint32_t(width), self.gate_out.data(), {y.data()});
    };
    if (rows > 0) {
      std::vector<th_tensor> gate_up, down;
      for (uint32_t e = 0; e < a.n_experts; ++e) {
        const std::string what = "expert " + std::to_string(e);
        gate_up.push_back(checked(a.experts[e].gate, what + " gate"));
        gate_up.push_back(checked(a.experts[e].up, what + " up"));
        down.push_back(checked(a.experts[e].down, what + " down"));
      }
      swiglu(begin, a.n_experts, self.xs.data(), rows, a.ffn_dim, gate_up, down, self.down_out);
    }
    if (a.shared_expert != nullptr && a.n_tokens > 0) {  // every token, weight 1: one group
      const th_moe_expert_weights& sh = *a.shared_expert;
      swiglu({0, a.n_tokens}, 1, a.x, a.n_tokens, size_t(sh.gate.ne[1]),
             {checked(sh.gate, "shared expert gate"), checked(sh.up, "shared expert up")}, {checked(sh.down, "shared expert down")},
             self.shared_out);
    }
    // Written only now: a product refused above leaves out as it was.
    if (a.shared_expert != nullptr) std::copy_n(self.shared_out.data(), size_t(a.n_tokens) * a.dim, a.out);
    else std::fill(a.out, a.out + size_t(a.n_tokens) * a.dim, 0.0f);
    for (size_t r = 0; r < rows; ++r) {
      float* out = a.out + size_t(self.row_token[r]) * a.dim;
      const float* d = &self.down_out[r * a.dim];
      const float w = self.row_weight[r];
      for (uint32_t c = 0; c < a.dim; ++c) out[c] += w * d[c];
    }
  });
}

// Longest-processing-time greedy: heaviest expert first onto the least loaded device.
th_status rebalance(th_instance*, const th_moe_load* load, th_moe_placement* out, th_error* err) {
  return sdk::guard(err, [&] {
    if (load == nullptr || out == nullptr || load->tokens_per_expert == nullptr || load->placement == nullptr ||
        out->placement == nullptr) {
      invalid("rebalance() got a NULL argument");
    }
    if (load->n_devices == 0) invalid("rebalance() needs n_devices > 0");
    const uint64_t* tokens = load->tokens_per_expert;
    std::vector<uint32_t> order(load->n_experts);
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return tokens[a] != tokens[b] ? tokens[a] > tokens[b] : a < b;
    });
    std::vector<uint64_t> device_load(load->n_devices, 0);
    std::vector<int32_t> placement(load->n_experts);
    for (uint32_t e : order) {
      const size_t d = size_t(std::min_element(device_load.begin(), device_load.end()) - device_load.begin());
      device_load[d] += tokens[e];
      placement[e] = int32_t(d);
    }
    // The output may alias the input placement: compare before writing.
    const bool changed = !std::equal(placement.begin(), placement.end(), load->placement);
    std::copy(placement.begin(), placement.end(), out->placement);
    out->changed = changed ? 1 : 0;
  });
}

const th_moe_vtable kVtable = {
    sizeof(th_moe_vtable), sdk::create_instance<TopK>, sdk::destroy_instance<TopK>, check, gate, experts, rebalance,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_MOE, TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
