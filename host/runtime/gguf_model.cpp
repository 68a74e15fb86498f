#include "runtime/gguf_model.hpp"

#include <cmath>
#include <climits>
#include <stdexcept>

#include "model/gguf.hpp"
#include "model/quant.hpp"

namespace tokenhost {
namespace {

struct Reader {
  const gguf::File& file;
  std::string path;
  std::string arch;

  [[noreturn]] void fail(const std::string& what) const { throw std::runtime_error(path + ": " + what); }

  int64_t hparam(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const {
    if (auto v = file.get_int(arch + "." + key)) return *v;
    if (fallback) return *fallback;
    fail("missing metadata '" + arch + "." + key + "'");
  }
  double hparam_float(const std::string& key, double fallback) const {
    return file.get_float(arch + "." + key).value_or(fallback);
  }

  // The tensor `name` as a [rows][cols] view, checked against the shape the metadata implies.
  WeightView matrix(const std::string& name, int64_t rows, int64_t cols, bool required = true) const {
    const gguf::File::Tensor* t = file.tensor(name);
    if (t == nullptr) {
      if (!required) return {};
      fail("missing tensor '" + name + "'");
    }
    int64_t t_rows = 1;
    for (size_t d = 1; d < t->ne.size(); ++d) t_rows *= t->ne[d];
    if (t->ne[0] != cols || t_rows != rows) {
      fail("tensor '" + name + "' has shape " + shape(t->ne) + ", expected [" + std::to_string(cols) + ", " +
           std::to_string(rows) + "]");
    }
    return WeightView{t->type, rows, cols, quant::row_bytes(t->type, cols), t->data};
  }
  WeightView vector(const std::string& name, int64_t n, bool required = true) const {
    WeightView v = matrix(name, 1, n, required);
    if (!v.empty() && v.type != TH_DTYPE_F32)
      fail("tensor '" + name + "' is " + quant::dtype_name(v.type) + "; norms and biases must be f32");
    return v;
  }
  // Expert e of a [cols, rows, n_experts] tensor.
  WeightView expert(const std::string& name, int64_t rows, int64_t cols, uint32_t e, uint32_t n_experts) const {
    // All three dimensions: [cols, n_experts, rows] holds as many elements, and would mix the experts.
    if (const gguf::File::Tensor* t = file.tensor(name);
        t != nullptr && (t->ne.size() != 3 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != n_experts))
      fail("tensor '" + name + "' has shape " + shape(t->ne) + ", expected [" + std::to_string(cols) + ", " +
           std::to_string(rows) + ", " + std::to_string(n_experts) + "] (" + std::to_string(n_experts) + " experts)");
    WeightView all = matrix(name, rows * n_experts, cols);
    all.rows = rows;
    all.data = all.row(int64_t(e) * rows);
    return all;
  }
  bool has(const std::string& key) const { return file.has(arch + "." + key); }
  static std::string shape(const std::vector<int64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
  }
};

// The shared expert's width, 0 when the model has none. qwen2moe always has one, of
// expert_shared_feed_forward_length, else feed_forward_length (as llama.cpp reads it). The other
// architectures have one when the metadata says so: expert_shared_feed_forward_length, or
// expert_shared_count (DeepSeek's convention: that many shared experts stored merged into one of
// count times the routed experts' width).
uint32_t shared_expert_width(const Reader& r, const th_model_info& i, int64_t dense_ffn) {
  const bool qwen2moe = r.arch == "qwen2moe";
  const int64_t count = qwen2moe ? 1 : r.hparam("expert_shared_count", 0);
  if (count < 0) r.fail("'" + r.arch + ".expert_shared_count' is negative");
  if (count == 0 && !r.has("expert_shared_feed_forward_length")) return 0;
  if (i.n_experts == 0)
    r.fail("a shared expert needs an MoE model, but '" + r.arch + ".expert_count' is 0 or missing");
  const int64_t width = r.hparam("expert_shared_feed_forward_length",
                                 qwen2moe ? dense_ffn : count * int64_t(i.ffn_dim));
  if (width <= 0) r.fail("'" + r.arch + ".expert_shared_feed_forward_length' must be positive");
  return uint32_t(width);
}

const char* const kSharedExpertTensors[] = {"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight",
                                            "ffn_gate_inp_shexp.weight"};

}  // namespace

TokenizerSpec read_tokenizer_spec(const gguf::File& file, const std::string& path, int64_t vocab_size) {
  TokenizerSpec tok;
  tok.model = file.get_string("tokenizer.ggml.model").value_or("");
  tok.pre = file.get_string("tokenizer.ggml.pre").value_or("default");
  tok.tokens = file.get_string_array("tokenizer.ggml.tokens");
  tok.scores = file.get_float_array("tokenizer.ggml.scores");
  for (int64_t t : file.get_int_array("tokenizer.ggml.token_type")) tok.token_types.push_back(int32_t(t));
  tok.merges = file.get_string_array("tokenizer.ggml.merges");
  // A special token the file names must exist: dropping it silently would generate without a BOS or
  // never stop at EOS. -1 (written as a uint32 by converters, 4294967295) is GGUF's "none".
  const int64_t vocab = tok.tokens.empty() ? vocab_size : int64_t(tok.tokens.size());
  auto id = [&](const char* key) {
    const auto v = file.get_int(key);
    if (!v || *v == -1 || *v == int64_t(UINT32_MAX)) return -1;
    if (*v < 0 || *v >= vocab)
      throw gguf::Error(path + ": '" + std::string(key) + "' is " + std::to_string(*v) + ", outside the vocabulary of " +
                        std::to_string(vocab) + " tokens");
    return int32_t(*v);
  };
  tok.bos = id("tokenizer.ggml.bos_token_id");
  tok.eos = id("tokenizer.ggml.eos_token_id");
  tok.unk = id("tokenizer.ggml.unknown_token_id");
  tok.pad = id("tokenizer.ggml.padding_token_id");
  tok.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(tok.model == "llama");
  tok.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  tok.lowercase = file.get_bool("tokenizer.ggml.normalizer.lowercase").value_or(true);
  tok.strip_accents = file.get_bool("tokenizer.ggml.normalizer.strip_accents").value_or(tok.lowercase);
  return tok;
}

LoadedModel load_gguf_model(const std::string& path, const std::string& name) {
  std::shared_ptr<gguf::File> file = gguf::File::open(path);
  Reader r{*file, path, file->get_string("general.architecture").value_or("")};
  const bool qwen2moe = r.arch == "qwen2moe", qwen3 = r.arch == "qwen3" || r.arch == "qwen3moe";
  if (r.arch != "llama" && r.arch != "qwen2" && !qwen2moe && !qwen3) {
    r.fail("unsupported architecture '" + r.arch + "' (this runtime serves llama, qwen2, qwen2moe, qwen3 and qwen3moe)");
  }
  auto w = std::make_shared<ModelWeights>();
  th_model_info& i = w->spec.info;
  w->spec.name = name;
  w->spec.architecture = r.arch;
  i.dim = uint32_t(r.hparam("embedding_length"));
  i.n_layers = uint32_t(r.hparam("block_count"));
  i.n_heads = uint32_t(r.hparam("attention.head_count"));
  i.n_kv_heads = uint32_t(r.hparam("attention.head_count_kv", i.n_heads));
  i.ffn_dim = uint32_t(r.hparam("feed_forward_length"));
  const int64_t context_len = r.hparam("context_length");
  if (context_len <= 0 || context_len > INT32_MAX)
    r.fail("'" + r.arch + ".context_length' is " + std::to_string(context_len) + "; a model needs a context of 1 or more positions");
  i.context_len = uint32_t(context_len);
  i.n_experts = uint32_t(r.hparam("expert_count", 0));
  i.n_experts_used = uint32_t(r.hparam("expert_used_count", 0));
  if ((qwen2moe || r.arch == "qwen3moe") && (i.n_experts == 0 || i.n_experts_used == 0))
    r.fail(r.arch + " needs '" + r.arch + ".expert_count' and '" + r.arch + ".expert_used_count' (it is an MoE architecture)");
  const int64_t dense_ffn = i.ffn_dim;
  // Routed experts may have a width of their own; without the key llama.cpp takes feed_forward_length
  // for llama and divides it among the experts used for qwen2moe.
  if (i.n_experts > 0)
    i.ffn_dim = uint32_t(r.hparam("expert_feed_forward_length", qwen2moe ? dense_ffn / i.n_experts_used : dense_ffn));
  // Whether each token's top-k expert weights are renormalized: DeepSeek's files say so
  // (expert_weights_norm); Qwen2-MoE keeps the softmax probabilities, the others renormalize.
  if (i.n_experts > 0)
    i.expert_weights_norm = file->get_bool(r.arch + ".expert_weights_norm").value_or(!qwen2moe) ? TH_EXPERT_WEIGHTS_NORMALIZED
                                                                                                   : TH_EXPERT_WEIGHTS_SOFTMAX;
  const uint32_t shared_ffn = shared_expert_width(r, i, dense_ffn);
  if (i.n_heads == 0 || i.n_kv_heads == 0 || i.n_heads % i.n_kv_heads != 0 || i.dim % i.n_heads != 0)
    r.fail("inconsistent head counts: " + std::to_string(i.n_heads) + " heads, " + std::to_string(i.n_kv_heads) +
           " KV heads, dim " + std::to_string(i.dim));
  i.head_dim = uint32_t(r.hparam("attention.key_length", i.dim / i.n_heads));
  if (uint32_t(r.hparam("rope.dimension_count", i.head_dim)) != i.head_dim)
    r.fail("partial rotary embeddings are not supported");
  const gguf::File::Tensor* embd = file->tensor("token_embd.weight");
  if (embd == nullptr || embd->ne.size() != 2) r.fail("missing or malformed tensor 'token_embd.weight'");
  i.vocab_size = uint32_t(embd->ne[1]);
  w->rms_eps = float(r.hparam_float("attention.layer_norm_rms_epsilon", 1e-5));
  if (!std::isfinite(w->rms_eps) || w->rms_eps <= 0)
    r.fail("'" + r.arch + ".attention.layer_norm_rms_epsilon' is " + std::to_string(w->rms_eps) +
           "; the norm needs a finite positive epsilon");
  w->rope.theta = float(r.hparam_float("rope.freq_base", 10000.0));
  if (!std::isfinite(w->rope.theta) || w->rope.theta <= 0)
    r.fail("'" + r.arch + ".rope.freq_base' is " + std::to_string(w->rope.theta) + "; rotary embeddings need a finite positive base");
  w->rope.neox = r.arch == "qwen2" || qwen2moe || qwen3;
  if (file->get_string(r.arch + ".rope.scaling.type").value_or("none") == "linear")
    w->rope.freq_scale = float(1.0 / r.hparam_float("rope.scaling.factor", 1.0));

  const int64_t dim = i.dim, q = int64_t(i.n_heads) * i.head_dim, kv = int64_t(i.n_kv_heads) * i.head_dim;
  w->embed = r.matrix("token_embd.weight", i.vocab_size, dim);
  w->out_norm = r.vector("output_norm.weight", dim);
  w->output = r.matrix("output.weight", i.vocab_size, dim, false);
  if (w->output.empty()) w->output = w->embed;  // tied
  i.weight_dtype = w->embed.type;
  for (uint32_t l = 0; l < i.n_layers; ++l) {
    std::string b = "blk." + std::to_string(l) + ".";
    LayerWeights L;
    L.attn_norm = r.vector(b + "attn_norm.weight", dim);
    L.ffn_norm = r.vector(b + "ffn_norm.weight", dim);
    L.wq = r.matrix(b + "attn_q.weight", q, dim);
    L.wk = r.matrix(b + "attn_k.weight", kv, dim);
    L.wv = r.matrix(b + "attn_v.weight", kv, dim);
    L.wo = r.matrix(b + "attn_output.weight", dim, q);
    L.bq = r.vector(b + "attn_q.bias", q, false);
    L.bk = r.vector(b + "attn_k.bias", kv, false);
    L.bv = r.vector(b + "attn_v.bias", kv, false);
    // Qwen3: each head's query and key RMS-normed (weights of head_dim) before RoPE.
    L.q_norm = r.vector(b + "attn_q_norm.weight", i.head_dim, qwen3);
    L.k_norm = r.vector(b + "attn_k_norm.weight", i.head_dim, qwen3);
    if (i.n_experts == 0) {
      L.experts.push_back({r.matrix(b + "ffn_gate.weight", i.ffn_dim, dim), r.matrix(b + "ffn_up.weight", i.ffn_dim, dim),
                           r.matrix(b + "ffn_down.weight", dim, i.ffn_dim)});
    } else {
      L.router = r.matrix(b + "ffn_gate_inp.weight", i.n_experts, dim);
      for (uint32_t e = 0; e < i.n_experts; ++e) {
        L.experts.push_back({r.expert(b + "ffn_gate_exps.weight", i.ffn_dim, dim, e, i.n_experts),
                             r.expert(b + "ffn_up_exps.weight", i.ffn_dim, dim, e, i.n_experts),
                             r.expert(b + "ffn_down_exps.weight", dim, i.ffn_dim, e, i.n_experts)});
      }
    }
    if (shared_ffn > 0) {
      L.shared_expert = {r.matrix(b + "ffn_gate_shexp.weight", shared_ffn, dim), r.matrix(b + "ffn_up_shexp.weight", shared_ffn, dim),
                         r.matrix(b + "ffn_down_shexp.weight", dim, shared_ffn)};
      L.shared_expert_gate = r.matrix(b + "ffn_gate_inp_shexp.weight", 1, dim, qwen2moe);  // optional but for qwen2moe
    } else {
      for (const char* t : kSharedExpertTensors)
        if (file->tensor(b + t))
          r.fail("tensor '" + b + t + "' belongs to a shared expert, but the metadata declares none ('" + r.arch +
                 ".expert_shared_feed_forward_length' or '" + r.arch + ".expert_shared_count')");
    }
    if (l == 0) i.weight_dtype = L.wq.type;
    w->layers.push_back(std::move(L));
  }
  i.act_dtype = TH_DTYPE_F32;
  i.kv_dtype = TH_DTYPE_F32;
  for (const auto& t : file->tensors()) w->bytes += t.bytes;

  LoadedModel out;
  out.tokenizer = read_tokenizer_spec(*file, path, i.vocab_size);
  const TokenizerSpec& tok = out.tokenizer;
  out.chat_template = file->get_string("tokenizer.chat_template").value_or("");
  if (!tok.tokens.empty() && tok.tokens.size() != i.vocab_size)
    r.fail("the tokenizer has " + std::to_string(tok.tokens.size()) + " tokens but token_embd.weight has " +
           std::to_string(i.vocab_size) + " rows");

  w->storage = std::shared_ptr<const void>(file, file.get());  // the mapping lives as long as the weights
  out.weights = w;
  return out;
}

}  // namespace tokenhost
