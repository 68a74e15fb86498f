// attention.reference: the conformance oracle for attention plugins.
//
// Causal scaled-dot-product attention over a ragged batch (or, under row_parent, over each row's
// ancestors: sdk::tree_visible), read from the paged KV cache through
// th_kv_layout (f32 or f16 elements, or q8_0 ones with their group scales), with plain loops and double accumulation. Slow on purpose: it is what every other
// attention plugin is measured against, so it favours obvious correctness and full input validation.
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_kv.hpp>

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

// The KV caches it reads: each element is turned into a float, then a double, as it is read.
constexpr std::initializer_list<th_dtype> kKvDtypes = {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_Q8_0};

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&]() -> th_status {
    if (query == nullptr || query->model == nullptr) {
      throw Error(TH_ERR_INVALID_ARGUMENT, "attention.reference: check() needs a model");
    }
    th_status status = TH_OK;
    for (const std::string& why : sdk::attention_cpu_refusals(*query->model, query->device, kKvDtypes)) {
      sdk::set_error(err, "attention.reference: " + why);
      status = TH_ERR_UNSUPPORTED;
    }
    return status;
  });
}

// Stateless: the instance only exists because the ABI has one.
struct Reference {
  explicit Reference(const th_create_args&) {}
};

void invalid(const std::string& why) {
  throw Error(TH_ERR_INVALID_ARGUMENT, "attention.reference: " + why);
}

th_status forward(th_instance*, const th_attention_batch* batch, th_error* err) {
  return sdk::guard(err, [&] {
    // Everything forward() reads, checked before any output is written.
    if (const std::string why = sdk::validate_attention_batch(batch, kKvDtypes); !why.empty()) invalid(why);
    const th_attention_batch& b = *batch;
    const uint32_t group = b.n_heads / b.n_kv_heads;
    const uint32_t d = b.head_dim;
    std::vector<double> scores;
    std::vector<uint32_t> extra, visible;  // the positions a row attends to
    std::vector<double> acc(d);
    std::vector<float> kv_row(d);
    auto load = [&](bool values, const int32_t* table, uint32_t p, uint32_t kvh) {  // dequantized for q8_0
      const uint32_t bs = b.kv->block_size;
      sdk::load_kv_head(*b.kv, values, b.layer, table[p / bs], p % bs, kvh, kv_row.data());
      return kv_row.data();
    };
    for (uint32_t s = 0; s < b.n_seqs; ++s) {
      const int32_t* table = b.block_tables[s];
      for (uint32_t i = b.seq_start[s]; i < b.seq_start[s + 1]; ++i) {
        const int64_t through = sdk::tree_visible(b, s, i, extra);
        visible.clear();
        for (int64_t p = 0; p <= through; ++p) visible.push_back(uint32_t(p));
        visible.insert(visible.end(), extra.begin(), extra.end());
        const uint32_t n_pos = uint32_t(visible.size());
        scores.assign(n_pos, 0.0);
        for (uint32_t h = 0; h < b.n_heads; ++h) {
          const uint32_t kvh = h / group;
          const float* q = b.q + int64_t(i) * b.q_row_stride + int64_t(h) * d;
          double max_score = -INFINITY;
          for (uint32_t p = 0; p < n_pos; ++p) {
            const float* k = load(false, table, visible[p], kvh);
            double dot = 0.0;
            for (uint32_t e = 0; e < d; ++e) dot += double(q[e]) * double(k[e]);
            scores[p] = double(b.scale) * dot;
            if (scores[p] > max_score) max_score = scores[p];
          }
          double sum = 0.0;
          for (uint32_t p = 0; p < n_pos; ++p) {
            scores[p] = std::exp(scores[p] - max_score);
            sum += scores[p];
          }
          acc.assign(d, 0.0);
          for (uint32_t p = 0; p < n_pos; ++p) {
            const float* v = load(true, table, visible[p], kvh);
            for (uint32_t e = 0; e < d; ++e) acc[e] += scores[p] * double(v[e]);
          }
          float* out = b.out + int64_t(i) * b.out_row_stride + int64_t(h) * d;
          for (uint32_t e = 0; e < d; ++e) out[e] = float(acc[e] / sum);
        }
      }
    }
  });
}

const th_attention_vtable kVtable = {
    sizeof(th_attention_vtable),
    sdk::create_instance<Reference>,
    sdk::destroy_instance<Reference>,
    check,
    forward,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_ATTENTION,
    TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
