// moe.topk: softmax top-k gating (optionally group-limited, DeepSeek's node-limited routing, and with a
// capacity per expert past which tokens are dropped), SwiGLU expert compute on f32 weights, and greedy
// (LPT) expert placement. Plain loops with double accumulation: the reference MoE plugin.
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
    config.require_bool("normalize");
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
    if (m.weight_dtype != TH_DTYPE_F32) {
      refuse("computes f32 expert weights only, the model's weights are " + type_name(m.weight_dtype));
    }
    if (query->device != nullptr && query->device->kind != TH_DEVICE_CPU) refuse("runs on the CPU only");
    return status;
  });
}

// One f32 weight matrix: rows of ne[0] elements, nb[1] bytes apart.
struct Matrix {
  const char* data;
  int64_t rows, cols, row_bytes;

  double dot_row(int64_t r, const double* x) const {
    const char* row = data + r * row_bytes;
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += double(reinterpret_cast<const float*>(row)[c]) * x[c];
    return sum;
  }
};

Matrix matrix(const th_tensor& t, const std::string& what, int64_t rows, int64_t cols) {
  if (t.dtype != TH_DTYPE_F32) {
    throw Error(TH_ERR_UNSUPPORTED, "moe.topk: " + what + " has dtype " + type_name(t.dtype) +
                                        ", only f32 expert weights are supported");
  }
  if (t.data == nullptr || t.device != TH_DEVICE_CPU) invalid(what + " is not in host memory");
  if (t.ne[0] != cols || t.ne[1] != rows) {
    invalid(what + " is [" + std::to_string(t.ne[1]) + " rows][" + std::to_string(t.ne[0]) + "], expected [" +
            std::to_string(rows) + "][" + std::to_string(cols) + "]");
  }
  if (t.nb[0] != int64_t(sizeof(float)) || t.nb[1] < cols * int64_t(sizeof(float))) {
    invalid(what + " rows are not contiguous f32 (nb[0] = " + std::to_string(t.nb[0]) + ", nb[1] = " +
            std::to_string(t.nb[1]) + ")");
  }
  return Matrix{static_cast<const char*>(t.data), rows, cols, t.nb[1]};
}

// One expert's SwiGLU feed-forward, validated: down( silu(gate x) * (up x) ).
struct Expert {
  Matrix gate, up, down;

  Expert(const th_moe_expert_weights& w, const std::string& what, int64_t dim, int64_t ffn)
      : gate(matrix(w.gate, what + " gate", ffn, dim)),
        up(matrix(w.up, what + " up", ffn, dim)),
        down(matrix(w.down, what + " down", dim, ffn)) {}

  // acc += weight * expert(x); h is scratch of gate.rows entries.
  void apply(const double* x, double weight, std::vector<double>& h, double* acc) const {
    h.resize(size_t(gate.rows));
    for (int64_t f = 0; f < gate.rows; ++f) {
      const double g = gate.dot_row(f, x);
      h[size_t(f)] = g / (1.0 + std::exp(-g)) * up.dot_row(f, x);
    }
    for (int64_t d = 0; d < down.rows; ++d) acc[d] += weight * down.dot_row(d, h.data());
  }
};

struct TopK {
  explicit TopK(const th_create_args& args) {
    const sdk::Config config(args.config);
    normalize = config.require_bool("normalize");
    n_groups = uint32_t(config.require_int("n_groups"));
    topk_groups = uint32_t(config.require_int("topk_groups"));
    capacity_factor = config.require_double("capacity_factor");
  }
  bool normalize;
  uint32_t n_groups, topk_groups;  // n_groups 1: every expert may be chosen
  double capacity_factor;          // 0: no capacity
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

th_status experts(th_instance*, const th_moe_experts_args* args, th_error* err) {
  return sdk::guard(err, [&] {
    if (args == nullptr || args->x == nullptr || args->expert_ids == nullptr || args->expert_weights == nullptr ||
        args->experts == nullptr || args->out == nullptr) {
      invalid("experts() got a NULL argument");
    }
    const th_moe_experts_args& a = *args;
    // Validate every expert a token uses (and the shared one) before writing any output.
    std::vector<int> slot(a.n_experts, -1);
    std::vector<Expert> used;
    for (size_t i = 0; i < size_t(a.n_tokens) * a.k; ++i) {
      const int32_t e = a.expert_ids[i];
      if (e < 0 || uint32_t(e) >= a.n_experts) {
        invalid("expert id " + std::to_string(e) + " is out of range [0, " + std::to_string(a.n_experts) + ")");
      }
      if (slot[size_t(e)] < 0) {
        slot[size_t(e)] = int(used.size());
        used.emplace_back(a.experts[e], "expert " + std::to_string(e), a.dim, a.ffn_dim);
      }
    }
    std::vector<Expert> shared;
    if (a.shared_expert != nullptr) {
      // The shared expert may be wider than the routed ones: take its width from its gate.
      shared.emplace_back(*a.shared_expert, "shared expert", a.dim, a.shared_expert->gate.ne[1]);
    }
    std::vector<double> x(a.dim), acc(a.dim), h;
    for (uint32_t t = 0; t < a.n_tokens; ++t) {
      for (uint32_t d = 0; d < a.dim; ++d) x[d] = a.x[size_t(t) * a.dim + d];
      std::fill(acc.begin(), acc.end(), 0.0);
      for (uint32_t j = 0; j < a.k; ++j) {
        const size_t i = size_t(t) * a.k + j;
        if (a.expert_weights[i] == 0.0f) continue;  // dropped past the expert's capacity
        used[size_t(slot[size_t(a.expert_ids[i])])].apply(x.data(), a.expert_weights[i], h, acc.data());
      }
      for (const Expert& s : shared) s.apply(x.data(), 1.0, h, acc.data());
      for (uint32_t d = 0; d < a.dim; ++d) a.out[size_t(t) * a.dim + d] = float(acc[d]);
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
