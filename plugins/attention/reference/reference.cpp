// attention.reference: the conformance oracle for attention plugins.
//
// Causal scaled-dot-product attention over a ragged batch, read from the paged KV cache through
// th_kv_layout, with plain loops and double accumulation. Slow on purpose: it is what every other
// attention plugin is measured against, so it favours obvious correctness and full input validation.
#include <tokenhost/plugin.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

std::string dtype_name(th_dtype dtype) {
  switch (dtype) {
    case TH_DTYPE_F32: return "f32";
    case TH_DTYPE_F16: return "f16";
    case TH_DTYPE_BF16: return "bf16";
    case TH_DTYPE_Q4_0: return "q4_0";
    case TH_DTYPE_Q8_0: return "q8_0";
    case TH_DTYPE_Q4_K: return "q4_k";
    case TH_DTYPE_Q6_K: return "q6_k";
    case TH_DTYPE_I8: return "i8";
    case TH_DTYPE_I32: return "i32";
    default: return "dtype " + std::to_string(dtype);
  }
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&]() -> th_status {
    if (query == nullptr || query->model == nullptr) {
      throw Error(TH_ERR_INVALID_ARGUMENT, "attention.reference: check() needs a model");
    }
    const th_model_info& m = *query->model;
    th_status status = TH_OK;
    auto refuse = [&](const std::string& why) {
      sdk::set_error(err, "attention.reference: " + why);
      status = TH_ERR_UNSUPPORTED;
    };
    if (m.kv_dtype != TH_DTYPE_F32) {
      refuse("supports kv dtype f32 only, the model's kv dtype is " + dtype_name(m.kv_dtype));
    }
    if (m.act_dtype != TH_DTYPE_F32) {
      refuse("supports activation dtype f32 only, the model's is " + dtype_name(m.act_dtype));
    }
    if (m.n_kv_heads == 0 || m.n_heads % m.n_kv_heads != 0) {
      refuse("n_heads (" + std::to_string(m.n_heads) + ") must be a multiple of n_kv_heads (" +
             std::to_string(m.n_kv_heads) + ")");
    }
    if (m.head_dim == 0) refuse("head_dim must be > 0");
    if (query->device != nullptr && query->device->kind != TH_DEVICE_CPU) {
      refuse("runs on the CPU only");
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

// Everything forward() reads, checked before any output is written.
void validate(const th_attention_batch& b) {
  if (b.q == nullptr || b.out == nullptr || b.positions == nullptr || b.seq_start == nullptr ||
      (b.n_seqs > 0 && (b.kv_len == nullptr || b.block_tables == nullptr)) || b.kv == nullptr) {
    invalid("batch has a NULL pointer (q, out, positions, seq_start, kv_len, block_tables or kv)");
  }
  if (b.n_heads == 0 || b.n_kv_heads == 0 || b.n_heads % b.n_kv_heads != 0) {
    invalid("n_heads (" + std::to_string(b.n_heads) + ") must be a positive multiple of n_kv_heads (" +
            std::to_string(b.n_kv_heads) + ")");
  }
  if (b.head_dim == 0) invalid("head_dim must be > 0");
  const int64_t row = int64_t(b.n_heads) * b.head_dim;
  if (b.q_row_stride < row || b.out_row_stride < row) {
    invalid("q_row_stride and out_row_stride must be >= n_heads * head_dim (" + std::to_string(row) + ")");
  }
  const th_kv_layout& kv = *b.kv;
  if (kv.dtype != TH_DTYPE_F32) invalid("kv layout dtype is " + dtype_name(kv.dtype) + ", only f32 is supported");
  if (kv.k_base == nullptr || kv.v_base == nullptr) invalid("kv layout has NULL k_base or v_base");
  if (kv.block_size == 0) invalid("kv layout block_size is 0");
  if (b.layer >= kv.n_layers) {
    invalid("layer " + std::to_string(b.layer) + " is out of range (kv layout has " +
            std::to_string(kv.n_layers) + " layers)");
  }
  if (kv.n_kv_heads != b.n_kv_heads || kv.head_dim != b.head_dim) {
    invalid("batch n_kv_heads/head_dim (" + std::to_string(b.n_kv_heads) + "/" + std::to_string(b.head_dim) +
            ") differ from the kv layout's (" + std::to_string(kv.n_kv_heads) + "/" +
            std::to_string(kv.head_dim) + ")");
  }
  if (b.seq_start[0] != 0 || b.seq_start[b.n_seqs] != b.n_tokens) {
    invalid("seq_start must start at 0 and end at n_tokens (" + std::to_string(b.n_tokens) + ")");
  }
  for (uint32_t s = 0; s < b.n_seqs; ++s) {
    const std::string seq = "sequence " + std::to_string(s);
    if (b.seq_start[s + 1] < b.seq_start[s]) invalid("seq_start decreases at " + seq);
    const uint32_t n_blocks = (b.kv_len[s] + kv.block_size - 1) / kv.block_size;
    if (n_blocks > 0 && b.block_tables[s] == nullptr) invalid(seq + " has a NULL block table");
    for (uint32_t j = 0; j < n_blocks; ++j) {
      const int32_t block = b.block_tables[s][j];
      if (block < 0 || uint32_t(block) >= kv.n_blocks) {
        invalid(seq + ": block table entry " + std::to_string(j) + " = " + std::to_string(block) +
                " is out of range [0, " + std::to_string(kv.n_blocks) + ")");
      }
    }
    for (uint32_t i = b.seq_start[s]; i < b.seq_start[s + 1]; ++i) {
      if (b.positions[i] < 0 || uint32_t(b.positions[i]) >= b.kv_len[s]) {
        invalid(seq + ": row " + std::to_string(i) + " has position " + std::to_string(b.positions[i]) +
                ", outside [0, kv_len = " + std::to_string(b.kv_len[s]) + ")");
      }
    }
  }
}

// Address of the head vector of (block table entry for position p, kv head h) in base.
const float* kv_vector(const th_attention_batch& b, const void* base, const int32_t* table, uint32_t p,
                       uint32_t h) {
  const th_kv_layout& kv = *b.kv;
  const char* addr = static_cast<const char*>(base) + int64_t(b.layer) * kv.layer_stride +
                     int64_t(table[p / kv.block_size]) * kv.block_stride + int64_t(h) * kv.head_stride +
                     int64_t(p % kv.block_size) * kv.token_stride;
  return reinterpret_cast<const float*>(addr);
}

th_status forward(th_instance*, const th_attention_batch* batch, th_error* err) {
  return sdk::guard(err, [&] {
    if (batch == nullptr) invalid("batch is NULL");
    const th_attention_batch& b = *batch;
    validate(b);
    const uint32_t group = b.n_heads / b.n_kv_heads;
    const uint32_t d = b.head_dim;
    std::vector<double> scores;
    std::vector<double> acc(d);
    for (uint32_t s = 0; s < b.n_seqs; ++s) {
      const int32_t* table = b.block_tables[s];
      for (uint32_t i = b.seq_start[s]; i < b.seq_start[s + 1]; ++i) {
        const uint32_t n_pos = uint32_t(b.positions[i]) + 1;
        scores.assign(n_pos, 0.0);
        for (uint32_t h = 0; h < b.n_heads; ++h) {
          const uint32_t kvh = h / group;
          const float* q = b.q + int64_t(i) * b.q_row_stride + int64_t(h) * d;
          double max_score = -INFINITY;
          for (uint32_t p = 0; p < n_pos; ++p) {
            const float* k = kv_vector(b, b.kv->k_base, table, p, kvh);
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
            const float* v = kv_vector(b, b.kv->v_base, table, p, kvh);
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
    "attention.reference",        "1.0.0",              &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
