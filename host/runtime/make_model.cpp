#include "runtime/make_model.hpp"

#include <algorithm>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

#include "model/gguf.hpp"
#include "model/quant.hpp"

namespace tokenhost {
namespace {

// A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then word pieces made of
// letters, with scores that favour shorter pieces, so that any text encodes (byte fallback) and common
// letter runs merge.
void add_tokenizer(gguf::Writer& w, uint32_t vocab_size, std::mt19937_64& rng) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.push_back(name);
    scores.push_back(0);
    types.push_back(6);
  }
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  std::vector<std::string> seen(tokens.begin(), tokens.end());
  std::uniform_int_distribution<size_t> pick(0, letters.size() - 1);
  // Singles first ("a", "▁a"), then longer pieces: every piece's prefix tends to be a token too.
  for (size_t i = 0; tokens.size() < vocab_size; ++i) {
    std::string piece;
    if (i < 2 * letters.size()) {
      piece = (i % 2 ? "\xE2\x96\x81" : "") + std::string(1, letters[i / 2]);
    } else {
      size_t len = 2 + i % 5;
      if (i % 3 == 0) piece = "\xE2\x96\x81";
      for (size_t k = 0; k < len; ++k) piece += letters[std::min(pick(rng), pick(rng))];  // skewed to common letters
    }
    if (std::find(seen.begin(), seen.end(), piece) != seen.end()) continue;
    seen.push_back(piece);
    tokens.push_back(piece);
    scores.push_back(-float(tokens.size()));
    types.push_back(1);
  }
  w.set("tokenizer.ggml.model", "llama");
  w.set_array("tokenizer.ggml.tokens", tokens);
  w.set_array("tokenizer.ggml.scores", scores);
  w.set_array("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.bos_token_id", uint32_t(1));
  w.set("tokenizer.ggml.eos_token_id", uint32_t(2));
  w.set("tokenizer.ggml.unknown_token_id", uint32_t(0));
}

}  // namespace

ModelShape model_shape_preset(const std::string& name) {
  ModelShape s;
  if (name == "stories260K") {
    s = {64, 5, 8, 4, 172, 512, 512};
  } else if (name == "110M") {
    s = {768, 12, 12, 12, 2048, 32000, 1024};
    s.tied_output = true;
  } else if (name == "1.1B") {
    s = {2048, 22, 32, 4, 5632, 32000, 2048};
  } else {
    throw std::invalid_argument("unknown model preset '" + name + "' (known: stories260K, 110M, 1.1B)");
  }
  return s;
}

void make_model(const MakeModelOptions& o) {
  const ModelShape& s = o.shape;
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
  };
  require(s.dim > 0 && s.n_heads > 0 && s.dim % s.n_heads == 0, "dim must be a positive multiple of n_heads");
  require(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads");
  require(s.vocab_size >= 259, "vocab_size must be at least 259 (3 control and 256 byte tokens)");
  require(s.n_layers > 0 && s.ffn_dim > 0, "n_layers and ffn_dim must be positive");
  require(s.n_experts_used <= s.n_experts, "n_experts_used must not exceed n_experts");
  const bool qwen2moe = s.architecture == "qwen2moe", biases = s.architecture == "qwen2" || qwen2moe;
  const bool qwen3moe = s.architecture == "qwen3moe", head_norms = s.architecture == "qwen3" || qwen3moe;
  require(s.architecture == "llama" || biases || head_norms, "architecture must be llama, qwen2, qwen2moe, qwen3 or qwen3moe");
  require(!qwen3moe || (s.n_experts > 0 && s.n_experts_used > 0 && s.n_shared_experts == 0),
          "architecture qwen3moe needs n_experts and n_experts_used > 0 and no shared expert");
  require(s.architecture != "qwen3" || s.n_experts == 0, "architecture qwen3 is dense: use qwen3moe for experts");
  require(s.n_shared_experts <= 1, "n_shared_experts must be 0 or 1");
  require(s.n_shared_experts == 0 || s.n_experts > 0, "a shared expert needs an MoE shape (n_experts > 0)");
  require(s.n_shared_experts == 1 || (s.shared_ffn_dim == 0 && !s.shared_expert_gate),
          "shared_ffn_dim and shared_expert_gate need a shared expert (n_shared_experts = 1)");
  require(!qwen2moe || (s.n_experts > 0 && s.n_experts_used > 0 && s.n_shared_experts == 1 && s.shared_expert_gate),
          "architecture qwen2moe needs n_experts and n_experts_used > 0 and a shared expert with its gate");
  require(quant::is_supported(o.type), std::string("unsupported type ") + quant::dtype_name(o.type));
  const uint32_t shared_ffn = s.n_shared_experts == 0 ? 0 : s.shared_ffn_dim ? s.shared_ffn_dim : s.ffn_dim;
  const size_t block = quant::block_elems(o.type);
  require(s.dim % block == 0 && s.ffn_dim % block == 0 && shared_ffn % block == 0,
          "dim, ffn_dim and shared_ffn_dim must be multiples of " + std::to_string(block) + " for " +
              quant::dtype_name(o.type));

  std::mt19937_64 rng(o.seed);
  gguf::Writer w;
  const std::string a = s.architecture;
  w.set("general.architecture", a);
  w.set("general.name", "tokenhost random " + std::string(quant::dtype_name(o.type)));
  w.set(a + ".context_length", s.context_len);
  w.set(a + ".embedding_length", s.dim);
  w.set(a + ".feed_forward_length", s.ffn_dim);
  w.set(a + ".block_count", s.n_layers);
  w.set(a + ".attention.head_count", s.n_heads);
  w.set(a + ".attention.head_count_kv", s.n_kv_heads);
  w.set(a + ".rope.dimension_count", s.dim / s.n_heads);
  w.set(a + ".rope.freq_base", s.rope_theta);
  w.set(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  if (s.n_experts > 0) {
    w.set(a + ".expert_count", s.n_experts);
    w.set(a + ".expert_used_count", s.n_experts_used);
    if (qwen2moe || qwen3moe) w.set(a + ".expert_feed_forward_length", s.ffn_dim);
  }
  if (shared_ffn > 0) {
    if (!qwen2moe) w.set(a + ".expert_shared_count", s.n_shared_experts);  // qwen2moe's is implied
    w.set(a + ".expert_shared_feed_forward_length", shared_ffn);
  }
  add_tokenizer(w, s.vocab_size, rng);

  std::normal_distribution<float> normal(0.0f, o.scale);
  std::vector<float> values;
  std::vector<uint8_t> packed;
  size_t made = 0;
  const size_t per_layer = 6 + (s.n_experts ? 4 : 3) + (biases ? 3 : 0) + (head_norms ? 2 : 0) + (shared_ffn ? 3 : 0) + s.shared_expert_gate;
  const size_t total = (s.tied_output ? 2 : 3) + size_t(s.n_layers) * per_layer;
  auto tensor = [&](const std::string& name, th_dtype type, std::vector<int64_t> ne, bool norm = false) {
    size_t n = 1;
    for (auto d : ne) n *= size_t(d);
    values.resize(n);
    for (auto& v : values) v = norm ? 1.0f + normal(rng) : normal(rng);
    size_t rows = n / size_t(ne[0]);
    packed.resize(quant::row_bytes(type, ne[0]) * rows);
    for (size_t r = 0; r < rows; ++r)
      quant::quantize_row(type, &values[r * size_t(ne[0])], &packed[r * quant::row_bytes(type, ne[0])], ne[0]);
    w.add_tensor(name, type, ne, packed.data(), packed.size());
    if (o.progress) o.progress(double(++made) / double(total));
  };
  const int64_t dim = s.dim, hd = s.dim / s.n_heads, kv = int64_t(s.n_kv_heads) * hd, ffn = s.ffn_dim;
  tensor("token_embd.weight", o.type, {dim, s.vocab_size});
  tensor("output_norm.weight", TH_DTYPE_F32, {dim}, true);
  if (!s.tied_output) tensor("output.weight", o.type, {dim, s.vocab_size});
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    tensor(b + "attn_norm.weight", TH_DTYPE_F32, {dim}, true);
    tensor(b + "attn_q.weight", o.type, {dim, dim});
    tensor(b + "attn_k.weight", o.type, {dim, kv});
    tensor(b + "attn_v.weight", o.type, {dim, kv});
    tensor(b + "attn_output.weight", o.type, {dim, dim});
    if (biases) {
      tensor(b + "attn_q.bias", TH_DTYPE_F32, {dim});
      tensor(b + "attn_k.bias", TH_DTYPE_F32, {kv});
      tensor(b + "attn_v.bias", TH_DTYPE_F32, {kv});
    }
    if (head_norms) {  // Qwen3: per-head RMS norms of the queries and keys
      tensor(b + "attn_q_norm.weight", TH_DTYPE_F32, {hd}, true);
      tensor(b + "attn_k_norm.weight", TH_DTYPE_F32, {hd}, true);
    }
    tensor(b + "ffn_norm.weight", TH_DTYPE_F32, {dim}, true);
    if (s.n_experts == 0) {
      tensor(b + "ffn_gate.weight", o.type, {dim, ffn});
      tensor(b + "ffn_up.weight", o.type, {dim, ffn});
      tensor(b + "ffn_down.weight", o.type, {ffn, dim});
    } else {
      tensor(b + "ffn_gate_inp.weight", TH_DTYPE_F32, {dim, s.n_experts});
      tensor(b + "ffn_gate_exps.weight", o.type, {dim, ffn, s.n_experts});
      tensor(b + "ffn_up_exps.weight", o.type, {dim, ffn, s.n_experts});
      tensor(b + "ffn_down_exps.weight", o.type, {ffn, dim, s.n_experts});
    }
    if (shared_ffn > 0) {
      if (s.shared_expert_gate) tensor(b + "ffn_gate_inp_shexp.weight", TH_DTYPE_F32, {dim});  // one logit per token
      tensor(b + "ffn_gate_shexp.weight", o.type, {dim, shared_ffn});
      tensor(b + "ffn_up_shexp.weight", o.type, {dim, shared_ffn});
      tensor(b + "ffn_down_shexp.weight", o.type, {shared_ffn, dim});
    }
  }
  w.write(o.path);
}

}  // namespace tokenhost
