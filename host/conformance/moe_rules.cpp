// moe rules: gate() picks valid experts with usable weights, experts() computes the weighted SwiGLU
// experts as float64 plain loops do, with f32 weights and (where check() takes them) q8_0 ones.
#include <algorithm>
#include <cmath>
#include <set>

#include "base/expert_placement.hpp"
#include "conformance/conformance.hpp"
#include "model/quant.hpp"

namespace tokenhost::conformance {
namespace {

struct ExpertWeights {
  std::vector<float> gate, up, down;  // [ffn][dim], [ffn][dim], [dim][ffn]
  th_moe_expert_weights abi{};
};

th_tensor matrix(std::vector<float>& data, int64_t rows, int64_t cols) {
  th_tensor t{};
  t.struct_size = sizeof t;
  t.dtype = TH_DTYPE_F32;
  t.n_dims = 2;
  t.ne[0] = cols;
  t.ne[1] = rows;
  t.ne[2] = t.ne[3] = 1;
  t.nb[0] = sizeof(float);
  t.nb[1] = cols * int64_t(sizeof(float));
  t.nb[2] = t.nb[3] = rows * t.nb[1];
  t.data = data.data();
  t.device = TH_DEVICE_CPU;
  return t;
}

double dot(const float* row, const double* x, uint32_t n) {
  double s = 0;
  for (uint32_t i = 0; i < n; ++i) s += double(row[i]) * x[i];
  return s;
}

// Experts of q8_0 weights against float64 loops over what they dequantize to, for a plugin whose check()
// takes a q8_0 model (ABI 1.10: the host's grouped products compute them). Per token, within 6% of its
// largest output: the host's integer kernels round activations to 8 bits per 32-element block, twice
// (the input, then the SwiGLU's output before down): 3.4% was seen with one seed in about 40, which a
// 3% bound failed; tests/host/backends/cpu/test_forward_moe.cpp bounds a whole forward pass at 6% too.
void quantized_experts_rule(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r) {
  const uint32_t n_experts = 6, k = 2;
  ModelSpec model = model_shape(4, 2, 8, TH_DTYPE_F16, n_experts, k);
  model.info.weight_dtype = TH_DTYPE_Q8_0;
  const uint32_t dim = model.info.dim, ffn = model.info.ffn_dim;
  std::string why;
  auto inst = instance_for(catalog, plugin, model, why);
  if (!inst) return r.not_applicable("moe.quantized_experts_match_reference", "check() refuses a q8_0 model: " + why);
  r.rule("moe.quantized_experts_match_reference", [&] {
    // Per expert: q8_0 bytes of gate, up, down and the floats they dequantize to.
    struct Stored {
      std::vector<uint8_t> bytes[3];
      std::vector<float> values[3];
    };
    std::vector<Stored> experts(n_experts);
    std::vector<th_moe_expert_weights> abi(n_experts);
    for (uint32_t e = 0; e < n_experts; ++e) {
      th_tensor* views[3] = {&abi[e].gate, &abi[e].up, &abi[e].down};
      for (int m = 0; m < 3; ++m) {
        const uint32_t rows = m < 2 ? ffn : dim, cols = m < 2 ? dim : ffn;
        std::vector<float>& v = experts[e].values[m];
        v.resize(size_t(rows) * cols);
        for (float& x : v) x = 0.3f * normal(rng);
        const size_t rb = quant::row_bytes(TH_DTYPE_Q8_0, cols);
        experts[e].bytes[m].resize(rb * rows);
        for (uint32_t row = 0; row < rows; ++row) {
          quant::quantize_row(TH_DTYPE_Q8_0, &v[size_t(row) * cols], &experts[e].bytes[m][row * rb], cols);
          quant::dequantize_row(TH_DTYPE_Q8_0, &experts[e].bytes[m][row * rb], &v[size_t(row) * cols], cols);
        }
        th_tensor t = matrix(v, rows, cols);
        t.dtype = TH_DTYPE_Q8_0;
        t.nb[0] = int64_t(quant::block_bytes(TH_DTYPE_Q8_0));
        t.nb[1] = int64_t(rb);
        t.nb[2] = t.nb[3] = int64_t(rb) * rows;
        t.data = experts[e].bytes[m].data();
        *views[m] = t;
      }
    }
    for (uint32_t round = 0; round < o.rounds; ++round) {
      const uint32_t n_tokens = uniform(rng, 1, 9);
      std::vector<int32_t> ids(size_t(n_tokens) * k);
      std::vector<float> weights(ids.size()), x(size_t(n_tokens) * dim), out(x.size(), std::nanf(""));
      for (uint32_t t = 0; t < n_tokens; ++t) {
        const int32_t first = int32_t(uniform(rng, 0, n_experts - 1));
        ids[t * k] = first;
        ids[t * k + 1] = (first + int32_t(uniform(rng, 1, n_experts - 1))) % int32_t(n_experts);
      }
      for (float& w : weights) w = std::fabs(normal(rng));
      for (float& v : x) v = normal(rng);
      th_moe_experts_args a{sizeof a, 0, n_tokens, dim, ffn, n_experts, k, x.data(), ids.data(), weights.data(),
                            abi.data(), nullptr, out.data()};
      th_error err;
      const th_status st = inst->call(&th_moe_vtable::experts, "experts", inst->handle(), &a, &err);
      expect(st == TH_OK, "experts() returned " + std::to_string(st) + " on q8_0 experts: " + err.text());
      std::vector<double> xd(dim), h(ffn);
      for (uint32_t t = 0; t < n_tokens; ++t) {
        for (uint32_t d = 0; d < dim; ++d) xd[d] = x[size_t(t) * dim + d];
        std::vector<double> ref(dim, 0.0);
        for (uint32_t j = 0; j < k; ++j) {
          const Stored& e = experts[size_t(ids[t * k + j])];
          for (uint32_t f = 0; f < ffn; ++f) {
            const double g = dot(&e.values[0][size_t(f) * dim], xd.data(), dim);
            h[f] = g / (1.0 + std::exp(-g)) * dot(&e.values[1][size_t(f) * dim], xd.data(), dim);
          }
          for (uint32_t d = 0; d < dim; ++d) ref[d] += double(weights[t * k + j]) * dot(&e.values[2][size_t(d) * ffn], h.data(), ffn);
        }
        double top = 0, worst = 0;
        for (uint32_t d = 0; d < dim; ++d) {
          top = std::max(top, std::fabs(ref[d]));
          const double diff = std::fabs(double(out[size_t(t) * dim + d]) - ref[d]);
          worst = std::isnan(diff) ? INFINITY : std::max(worst, diff);
        }
        expect(worst <= 6e-2 * top + 1e-4, "token " + std::to_string(t) + ": an output is " + std::to_string(worst) +
                                               " from the float64 experts' (largest " + std::to_string(top) + ")");
      }
    }
  });
}

// rebalance() (called by host 1.10 for engines with expert partitions) answers a placement the engine
// can apply: by slots (every expert in one at least, ids in range) or by device (each in range), and
// `changed` as it differs from the current one, on skewed loads over 2-3 devices.
void rebalance_rule(const PluginInstance& inst, Rng& rng, const Options& o, Report& r) {
  if (inst.fn(&th_moe_vtable::rebalance) == nullptr)
    return r.not_applicable("moe.rebalance_places_every_expert", "rebalance() is NULL: the plugin never moves experts");
  r.rule("moe.rebalance_places_every_expert", [&] {
    const uint32_t n_experts = 8;
    for (uint32_t round = 0; round < o.rounds; ++round) {
      const uint32_t devices = uniform(rng, 2, 3), per_device = (n_experts + devices - 1) / devices + uniform(rng, 0, 1);
      std::vector<uint64_t> tokens(n_experts);
      for (uint32_t e = 0; e < n_experts; ++e) tokens[e] = uint64_t(1000.0 / (1 + e) * (0.5 + std::fabs(normal(rng))));  // skewed
      const ExpertPlacement start(1, n_experts, devices, per_device);  // in order, as an engine starts
      const std::vector<int32_t> slots = start.slots(0), placement = start.first_devices(0);
      th_moe_load load{};
      load.struct_size = sizeof load;
      load.n_experts = n_experts;
      load.n_devices = devices;
      load.tokens_per_expert = tokens.data();
      load.placement = placement.data();
      load.slots_per_device = per_device;
      load.slot_expert = slots.data();
      const std::vector<double> seconds(devices, 0.01);
      load.device_seconds = seconds.data();
      std::vector<int32_t> out_placement = placement, out_slots(slots.size(), -1);
      th_moe_placement out{};
      out.struct_size = sizeof out;
      out.placement = out_placement.data();
      out.changed = -1;
      out.slot_expert = out_slots.data();
      th_error err;
      const th_status st = inst.call(&th_moe_vtable::rebalance, "rebalance", inst.handle(), &load, &out, &err);
      expect(st == TH_OK, "rebalance() returned " + std::to_string(st) + ": " + err.text());
      const std::string where = " (round " + std::to_string(round) + ", " + std::to_string(devices) + " devices of " +
                                std::to_string(per_device) + " slots)";
      const bool by_slots = std::any_of(out_slots.begin(), out_slots.end(), [](int32_t e) { return e != -1; });
      if (by_slots) {
        std::vector<int> held(n_experts, 0);
        for (size_t i = 0; i < out_slots.size(); ++i) {
          expect(out_slots[i] >= -1 && out_slots[i] < int32_t(n_experts),
                 "slot " + std::to_string(i) + " holds expert " + std::to_string(out_slots[i]) + where);
          if (out_slots[i] >= 0) ++held[size_t(out_slots[i])];
        }
        for (uint32_t e = 0; e < n_experts; ++e) expect(held[e] > 0, "expert " + std::to_string(e) + " has no slot" + where);
        expect((out.changed != 0) == (out_slots != slots), "changed = " + std::to_string(out.changed) + " for slots that " +
                                                                (out_slots != slots ? "differ" : "do not differ") + where);
      } else {
        for (uint32_t e = 0; e < n_experts; ++e)
          expect(out_placement[e] >= 0 && uint32_t(out_placement[e]) < devices,
                 "expert " + std::to_string(e) + " placed on device " + std::to_string(out_placement[e]) + where);
        expect((out.changed != 0) == (out_placement != placement), "changed = " + std::to_string(out.changed) + " for a placement that " +
                                                                       (out_placement != placement ? "differs" : "does not differ") + where);
      }
    }
  });
}

}  // namespace

void moe_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r) {
  const uint32_t n_experts = 6, k = 2;
  const ModelSpec model = model_shape(4, 2, 8, TH_DTYPE_F16, n_experts, k);
  const uint32_t dim = model.info.dim, ffn = model.info.ffn_dim;
  quantized_experts_rule(catalog, plugin, rng, o, r);
  std::string why;
  auto inst = instance_for(catalog, plugin, model, why);
  if (!inst) {
    r.not_applicable("moe.gate_valid", "check() refuses a 6-expert f32 model: " + why);
    r.not_applicable("moe.experts_match_reference", "check() refuses a 6-expert f32 model: " + why);
    return;
  }
  std::vector<ExpertWeights> experts(n_experts);
  std::vector<th_moe_expert_weights> abi;
  for (auto& e : experts) {
    for (auto* m : {&e.gate, &e.up}) m->resize(size_t(ffn) * dim);
    e.down.resize(size_t(dim) * ffn);
    for (auto* m : {&e.gate, &e.up, &e.down})
      for (auto& x : *m) x = 0.3f * normal(rng);
    e.abi.gate = matrix(e.gate, ffn, dim);
    e.abi.up = matrix(e.up, ffn, dim);
    e.abi.down = matrix(e.down, dim, ffn);
    abi.push_back(e.abi);
  }
  std::vector<std::vector<int32_t>> ids_of_round;
  std::vector<std::vector<float>> weights_of_round, x_of_round;
  r.rule("moe.gate_valid", [&] {
    for (uint32_t round = 0; round < o.rounds; ++round) {
      const uint32_t n_tokens = uniform(rng, 1, 9);
      std::vector<float> logits(size_t(n_tokens) * n_experts), weights(size_t(n_tokens) * k, std::nanf(""));
      for (auto& x : logits) x = 2.0f * normal(rng);
      std::vector<int32_t> ids(size_t(n_tokens) * k, -7);
      th_moe_gate_args g{sizeof g, uniform(rng, 0, 1), n_tokens, n_experts, k, logits.data(), ids.data(), weights.data()};
      th_error err;
      const th_status st = inst->call(&th_moe_vtable::gate, "gate", inst->handle(), &g, &err);
      expect(st == TH_OK, "gate() returned " + std::to_string(st) + ": " + err.text());
      for (uint32_t t = 0; t < n_tokens; ++t) {
        std::set<int32_t> chosen;
        for (uint32_t j = 0; j < k; ++j) {
          const int32_t e = ids[t * k + j];
          const float w = weights[t * k + j];
          expect(e >= 0 && uint32_t(e) < n_experts, "token " + std::to_string(t) + " goes to expert " + std::to_string(e) +
                                                        " of " + std::to_string(n_experts));
          expect(chosen.insert(e).second, "token " + std::to_string(t) + " goes to expert " + std::to_string(e) + " twice");
          expect(std::isfinite(w) && w >= 0, "token " + std::to_string(t) + " has gate weight " + std::to_string(w));
        }
      }
      std::vector<float> x(size_t(n_tokens) * dim);
      for (auto& v : x) v = normal(rng);
      ids_of_round.push_back(ids);
      weights_of_round.push_back(weights);
      x_of_round.push_back(x);
    }
  });
  r.rule("moe.experts_match_reference", [&] {
    expect(!ids_of_round.empty() && ids_of_round.size() == o.rounds, "moe.gate_valid failed first");
    for (size_t round = 0; round < ids_of_round.size(); ++round) {
      const auto& ids = ids_of_round[round];
      const auto& weights = weights_of_round[round];
      const auto& x = x_of_round[round];
      const uint32_t n_tokens = uint32_t(x.size() / dim);
      std::vector<float> out(x.size(), std::nanf(""));
      th_moe_experts_args a{sizeof a, 0, n_tokens, dim, ffn, n_experts, k, x.data(), ids.data(), weights.data(),
                            abi.data(), nullptr, out.data()};
      th_error err;
      const th_status st = inst->call(&th_moe_vtable::experts, "experts", inst->handle(), &a, &err);
      expect(st == TH_OK, "experts() returned " + std::to_string(st) + ": " + err.text());
      std::vector<double> xd(dim), h(ffn);
      for (uint32_t t = 0; t < n_tokens; ++t) {
        for (uint32_t d = 0; d < dim; ++d) xd[d] = x[size_t(t) * dim + d];
        std::vector<double> ref(dim, 0.0);
        for (uint32_t j = 0; j < k; ++j) {
          const ExpertWeights& e = experts[size_t(ids[t * k + j])];
          for (uint32_t f = 0; f < ffn; ++f) {
            const double g = dot(&e.gate[size_t(f) * dim], xd.data(), dim);
            h[f] = g / (1.0 + std::exp(-g)) * dot(&e.up[size_t(f) * dim], xd.data(), dim);
          }
          for (uint32_t d = 0; d < dim; ++d) ref[d] += double(weights[t * k + j]) * dot(&e.down[size_t(d) * ffn], h.data(), ffn);
        }
        for (uint32_t d = 0; d < dim; ++d) {
          const double got = out[size_t(t) * dim + d];
          expect(std::fabs(got - ref[d]) <= 1e-3 * (1.0 + std::fabs(ref[d])),
                 "token " + std::to_string(t) + ", element " + std::to_string(d) + ": got " + std::to_string(got) +
                     ", the float64 experts give " + std::to_string(ref[d]));
        }
      }
    }
  });
  rebalance_rule(*inst, rng, o, r);
}

}  // namespace tokenhost::conformance
