// MoE models with a shared expert, written by make_model and read by the GGUF loader: the metadata and
// tensors GGUF names for them (llama with or without the sigmoid gate, qwen2moe) read back as written;
// a shared-expert tensor of the wrong shape, missing, or not declared by the metadata is refused with a
// message naming it; make_model refuses inconsistent shared-expert shapes, naming the field.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "files.hpp"
#include "harness.hpp"
#include "model/gguf.hpp"
#include "model/quant.hpp"
#include "runtime/gguf_model.hpp"
#include "runtime/make_model.hpp"

namespace runtime_gguf_model_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Contains;

namespace {

constexpr uint32_t kDim = 64, kExpertFfn = 32, kSharedFfn = 96;

MakeModelOptions shared_expert_model(const std::string& path, const std::string& arch, bool gate, th_dtype type,
                                     uint64_t seed = 1) {
  MakeModelOptions o;
  o.path = path;
  o.type = type;
  o.seed = seed;
  o.shape.dim = kDim;
  o.shape.n_heads = 4;
  o.shape.n_kv_heads = 2;
  o.shape.ffn_dim = kExpertFfn;
  o.shape.vocab_size = 300;
  o.shape.context_len = 128;
  o.shape.n_experts = 4;
  o.shape.n_experts_used = 2;
  o.shape.n_shared_experts = 1;
  o.shape.shared_ffn_dim = kSharedFfn;
  o.shape.shared_expert_gate = gate;
  o.shape.architecture = arch;
  return o;
}

std::string load_error(const std::string& path) {
  try {
    load_gguf_model(path, "m");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(loaded)";
}

// Loading path fails with a message that starts with the path and contains `message`.
void refused(const std::string& path, const std::string& message) {
  const std::string error = load_error(path);
  INFO(error);
  CHECK(error.rfind(path + ": ", 0) == 0);
  CHECK_THAT(error, Contains(message));
}

// Where the one occurrence of `text` is in `bytes`.
size_t find_once(const std::vector<uint8_t>& bytes, const std::string& text) {
  auto at = std::search(bytes.begin(), bytes.end(), text.begin(), text.end());
  REQUIRE(at != bytes.end());
  REQUIRE(std::search(at + 1, bytes.end(), text.begin(), text.end()) == bytes.end());
  return size_t(at - bytes.begin());
}

// Renames a key or tensor in place (same length, so the file stays well formed).
void rename(const std::string& path, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  std::vector<uint8_t> bytes = read_file(path);
  std::copy(to.begin(), to.end(), bytes.begin() + long(find_once(bytes, from)));
  write_file(path, bytes.data(), bytes.size());
}

// Swaps the two dimensions in a 2-D tensor's info (its data keeps its size, so the file stays well formed).
void transpose_shape(const std::string& path, const std::string& tensor) {
  std::vector<uint8_t> bytes = read_file(path);
  uint8_t* info = &bytes[find_once(bytes, tensor) + tensor.size()];  // uint32 n_dims, uint64 ne[n_dims]
  uint32_t n_dims;
  std::memcpy(&n_dims, info, 4);
  REQUIRE(n_dims == 2);
  std::swap_ranges(info + 4, info + 12, info + 12);
  write_file(path, bytes.data(), bytes.size());
}

// Mean and standard deviation of a weight's elements, dequantized.
std::pair<double, double> moments(const WeightView& w) {
  std::vector<float> row(size_t(w.cols));
  double sum = 0, sq = 0;
  for (int64_t r = 0; r < w.rows; ++r) {
    quant::dequantize_row(w.type, w.row(r), row.data(), w.cols);
    for (float x : row) sum += x, sq += double(x) * x;
  }
  const double n = double(w.rows * w.cols), mean = sum / n;
  return {mean, std::sqrt(sq / n - mean * mean)};
}

}  // namespace

TEST_CASE("gguf model: a shared expert reads back as make_model wrote it", "[gguf_model][moe]") {
  TempDir dir;
  auto rng = fresh_rng("gguf model shared expert");
  struct Variant {
    std::string arch;
    bool gate;
    th_dtype type;
  };
  for (const Variant& v : {Variant{"llama", false, TH_DTYPE_F16}, Variant{"llama", true, TH_DTYPE_Q8_0},
                           Variant{"qwen2moe", true, TH_DTYPE_F32}}) {
    INFO(v.arch << (v.gate ? ", gated, " : ", ungated, ") << quant::dtype_name(v.type));
    const MakeModelOptions o = shared_expert_model(dir.file(v.arch + std::to_string(v.gate) + ".gguf"), v.arch, v.gate, v.type, rng());
    make_model(o);

    auto file = gguf::File::open(o.path);
    const std::string a = v.arch + ".";
    CHECK(file->get_int(a + "expert_shared_feed_forward_length") == kSharedFfn);
    if (v.arch == "qwen2moe") {  // as llama.cpp's converter writes it: routed width, no count
      CHECK(file->get_int(a + "expert_feed_forward_length") == kExpertFfn);
      CHECK_FALSE(file->has(a + "expert_shared_count"));
    } else {
      CHECK(file->get_int(a + "expert_shared_count") == 1);
    }
    const gguf::File::Tensor* gate_inp = file->tensor("blk.0.ffn_gate_inp_shexp.weight");
    CHECK((gate_inp != nullptr) == v.gate);
    if (gate_inp) CHECK(gate_inp->ne == std::vector<int64_t>{kDim});  // one logit per token

    LoadedModel m = load_gguf_model(o.path, "m");
    const ModelWeights& w = *m.weights;
    CHECK(w.spec.architecture == v.arch);
    CHECK(w.spec.info.n_experts == 4);
    CHECK(w.spec.info.n_experts_used == 2);
    CHECK(w.spec.info.ffn_dim == kExpertFfn);
    CHECK(w.rope.neox == (v.arch == "qwen2moe"));
    REQUIRE(w.layers.size() == 2);
    std::vector<double> means;
    for (size_t l = 0; l < w.layers.size(); ++l) {
      const LayerWeights& L = w.layers[l];
      const std::string b = "blk." + std::to_string(l) + ".";
      CHECK(L.bq.empty() == (v.arch == "llama"));
      struct Expected {
        const WeightView& view;
        std::string tensor;
        int64_t rows, cols;
      };
      for (const Expected& e : {Expected{L.shared_expert.gate, "ffn_gate_shexp", kSharedFfn, kDim},
                                Expected{L.shared_expert.up, "ffn_up_shexp", kSharedFfn, kDim},
                                Expected{L.shared_expert.down, "ffn_down_shexp", kDim, kSharedFfn}}) {
        INFO(b + e.tensor);
        REQUIRE_FALSE(e.view.empty());
        CHECK(e.view.type == v.type);
        CHECK(e.view.rows == e.rows);
        CHECK(e.view.cols == e.cols);
        const gguf::File::Tensor* t = file->tensor(b + e.tensor + ".weight");
        REQUIRE(t != nullptr);
        CHECK(std::memcmp(e.view.data, t->data, t->bytes) == 0);  // the view is of that tensor
        auto [mean, sd] = moments(e.view);  // seeded normal(0, scale) weights, not a constant
        CHECK(std::abs(mean) < 0.1 * o.scale);
        CHECK(sd == Approx(o.scale).epsilon(0.1));
        means.push_back(mean);
      }
      CHECK(L.shared_expert_gate.empty() == !v.gate);
      if (v.gate) {
        CHECK(L.shared_expert_gate.type == TH_DTYPE_F32);
        CHECK(L.shared_expert_gate.rows == 1);
        CHECK(L.shared_expert_gate.cols == kDim);
        CHECK(std::memcmp(L.shared_expert_gate.data, file->tensor(b + "ffn_gate_inp_shexp.weight")->data, kDim * 4) == 0);
      }
    }
    std::sort(means.begin(), means.end());
    CHECK(std::adjacent_find(means.begin(), means.end()) == means.end());  // every tensor drawn afresh
  }
}

TEST_CASE("gguf model: a bad shared expert is refused, naming the tensor and the expected shape", "[gguf_model][moe]") {
  TempDir dir;
  int files = 0;
  auto make = [&](const std::string& arch, bool gate) {
    MakeModelOptions o = shared_expert_model(dir.file("m" + std::to_string(files++) + ".gguf"), arch, gate, TH_DTYPE_F32);
    make_model(o);
    REQUIRE(load_error(o.path) == "(loaded)");
    return o.path;
  };

  std::string path = make("llama", true);
  transpose_shape(path, "blk.1.ffn_up_shexp.weight");
  refused(path, "tensor 'blk.1.ffn_up_shexp.weight' has shape [96, 64], expected [64, 96]");

  path = make("qwen2moe", true);
  transpose_shape(path, "blk.0.ffn_down_shexp.weight");
  refused(path, "tensor 'blk.0.ffn_down_shexp.weight' has shape [64, 96], expected [96, 64]");

  path = make("llama", false);
  rename(path, "blk.1.ffn_gate_shexp.weight", "blk.1.ffn_gate_shexq.weight");
  refused(path, "missing tensor 'blk.1.ffn_gate_shexp.weight'");

  // The gate is optional for llama (ungated shared expert) but part of qwen2moe.
  path = make("qwen2moe", true);
  rename(path, "blk.1.ffn_gate_inp_shexp.weight", "blk.1.ffn_gate_inp_shexq.weight");
  refused(path, "missing tensor 'blk.1.ffn_gate_inp_shexp.weight'");

  // Shared-expert tensors the metadata does not declare are not silently left out.
  path = make("llama", true);
  rename(path, "llama.expert_shared_count", "llama.expert_shared_counX");
  rename(path, "llama.expert_shared_feed_forward_length", "llama.expert_shared_feed_forward_lengtX");
  refused(path, "tensor 'blk.0.ffn_gate_shexp.weight' belongs to a shared expert, but the metadata declares none");

  // A shared expert without routed experts.
  path = make("llama", false);
  rename(path, "llama.expert_count", "llama.expert_counX");
  refused(path, "a shared expert needs an MoE model, but 'llama.expert_count' is 0 or missing");
}

namespace {
// Overwrites dimension `dim` of a tensor's shape in its info (uint32 n_dims, uint64 ne[n_dims] after the name).
void patch_dim(const std::string& path, const std::string& tensor, uint32_t dim, uint64_t value) {
  std::vector<uint8_t> bytes = read_file(path);
  uint8_t* info = &bytes[find_once(bytes, tensor) + tensor.size()];
  uint32_t n_dims;
  std::memcpy(&n_dims, info, 4);
  REQUIRE(dim < n_dims);
  std::memcpy(info + 4 + 8 * dim, &value, 8);
  write_file(path, bytes.data(), bytes.size());
}
}  // namespace

TEST_CASE("gguf model: corrupt or misshapen expert tensors and qwen3 head norms are refused, naming the tensor", "[gguf_model][moe]") {
  TempDir dir;
  int files = 0;
  auto make = [&](const std::string& arch, th_dtype type) {
    MakeModelOptions o = shared_expert_model(dir.file("m" + std::to_string(files++) + ".gguf"), arch, false, type);
    if (arch.rfind("qwen3", 0) == 0) o.shape.n_shared_experts = 0, o.shape.shared_ffn_dim = 0;
    if (arch == "qwen3") o.shape.n_experts = o.shape.n_experts_used = 0;
    make_model(o);
    REQUIRE(load_error(o.path) == "(loaded)");
    return o.path;
  };
  for (th_dtype type : {TH_DTYPE_Q8_0, TH_DTYPE_Q4_0, TH_DTYPE_F16}) {
    INFO(quant::dtype_name(type));
    // Experts and rows swapped: as many elements, the experts' rows interleaved.
    std::string path = make("qwen3moe", type);
    patch_dim(path, "blk.1.ffn_up_exps.weight", 1, 4);
    patch_dim(path, "blk.1.ffn_up_exps.weight", 2, kExpertFfn);
    refused(path, "tensor 'blk.1.ffn_up_exps.weight' has shape [64, 4, 32], expected [64, 32, 4] (4 experts)");
    // One expert fewer than the metadata says.
    path = make("llama", type);
    patch_dim(path, "blk.0.ffn_down_exps.weight", 2, 3);
    refused(path, "tensor 'blk.0.ffn_down_exps.weight' has shape [32, 64, 3], expected [32, 64, 4] (4 experts)");
    // Its data past the end of the file.
    path = make("qwen3moe", type);
    patch_dim(path, "blk.1.ffn_gate_exps.weight", 2, 4000);
    refused(path, "tensor 'blk.1.ffn_gate_exps.weight' shape [64, 32, 4000] of " + std::string(quant::dtype_name(type)) + " needs more bytes than the whole file");
    // A missing one.
    path = make("qwen3moe", type);
    rename(path, "blk.0.ffn_gate_exps.weight", "blk.0.ffn_gate_expz.weight");
    refused(path, "missing tensor 'blk.0.ffn_gate_exps.weight'");
  }
  // Qwen3's per-head norms: required, of the head's width, f32.
  std::string path = make("qwen3", TH_DTYPE_F32);
  rename(path, "blk.1.attn_k_norm.weight", "blk.1.attn_k_norX.weight");
  refused(path, "missing tensor 'blk.1.attn_k_norm.weight'");
  path = make("qwen3", TH_DTYPE_F32);
  patch_dim(path, "blk.0.attn_q_norm.weight", 0, 8);
  refused(path, "tensor 'blk.0.attn_q_norm.weight' has shape [8], expected [16, 1]");
}

TEST_CASE("make_model: inconsistent shared-expert shapes are refused, naming the field, and write nothing", "[gguf_model][moe]") {
  TempDir dir;
  const std::string path = dir.file("bad.gguf");
  auto refused = [&](const std::function<void(MakeModelOptions&)>& change, const std::string& message) {
    MakeModelOptions o = shared_expert_model(path, "llama", true, TH_DTYPE_F32);
    change(o);
    CHECK_THROWS_WITH(make_model(o), Contains(message));
    CHECK_FALSE(std::filesystem::exists(path));
  };
  refused([](MakeModelOptions& o) { o.shape.n_shared_experts = 2; }, "n_shared_experts must be 0 or 1");
  refused([](MakeModelOptions& o) { o.shape.n_experts = o.shape.n_experts_used = 0; }, "a shared expert needs an MoE shape");
  refused([](MakeModelOptions& o) { o.shape.n_shared_experts = 0; }, "need a shared expert");
  refused([](MakeModelOptions& o) { o.shape.architecture = "qwen2moe", o.shape.shared_expert_gate = false; },
          "qwen2moe needs");
  refused([](MakeModelOptions& o) { o.shape.architecture = "deepseek2"; }, "architecture must be llama, qwen2, qwen2moe, qwen3 or qwen3moe");
  refused([](MakeModelOptions& o) { o.type = TH_DTYPE_Q4_0, o.shape.shared_ffn_dim = 48; }, "multiples of 32");
  refused([](MakeModelOptions& o) { o.shape.architecture = "qwen3moe"; }, "qwen3moe needs n_experts and n_experts_used > 0 and no shared expert");
  refused([](MakeModelOptions& o) { o.shape.architecture = "qwen3", o.shape.n_shared_experts = 0, o.shape.shared_ffn_dim = 0,
                                    o.shape.shared_expert_gate = false; },
          "architecture qwen3 is dense");
}

namespace {
// Overwrites the value of metadata `key` (a scalar of T's size) in place.
template <class T>
void patch_value(const std::string& path, const std::string& key, T value) {
  std::vector<uint8_t> bytes = read_file(path);
  const size_t at = find_once(bytes, key) + key.size() + 4;  // the key's bytes, then its uint32 value type
  std::memcpy(&bytes[at], &value, sizeof value);
  write_file(path, bytes.data(), bytes.size());
}
}  // namespace

TEST_CASE("gguf model: metadata a model cannot work with is refused at load, naming the key", "[gguf_model]") {
  TempDir dir;
  int files = 0;
  auto make = [&] {
    MakeModelOptions o;
    o.path = dir.file("m" + std::to_string(files++) + ".gguf");
    o.seed = fresh_rng("gguf refusals")();
    make_model(o);
    REQUIRE(load_error(o.path) == "(loaded)");
    return o.path;
  };
  std::string path = make();
  patch_value(path, "llama.context_length", uint32_t(0));
  refused(path, "'llama.context_length' is 0; a model needs a context of 1 or more positions");

  for (float eps : {std::nanf(""), INFINITY, 0.0f, -1e-5f}) {
    path = make();
    patch_value(path, "llama.attention.layer_norm_rms_epsilon", eps);
    refused(path, "'llama.attention.layer_norm_rms_epsilon' is");
    refused(path, "the norm needs a finite positive epsilon");
  }

  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
    path = make();
    const uint32_t vocab = uint32_t(load_gguf_model(path, "m").weights->spec.info.vocab_size);
    patch_value(path, key, vocab);  // one past the last token
    refused(path, "'" + std::string(key) + "' is " + std::to_string(vocab) + ", outside the vocabulary of " +
                      std::to_string(vocab) + " tokens");
  }
}

TEST_CASE("gguf model: a special token id of -1 (4294967295 as written) means none", "[gguf_model]") {
  TempDir dir;
  MakeModelOptions o;
  o.path = dir.file("m.gguf");
  make_model(o);
  patch_value(o.path, "tokenizer.ggml.bos_token_id", uint32_t(UINT32_MAX));
  const LoadedModel m = load_gguf_model(o.path, "m");
  REQUIRE(m.tokenizer.bos == -1);
  REQUIRE(m.tokenizer.eos == 2);
}

TEST_CASE("gguf model: a vocabulary-only file gives the model's tokenizer, and one without tokens none", "[gguf_model]") {
  TempDir dir;
  MakeModelOptions o;
  o.path = dir.file("m.gguf");
  o.seed = fresh_rng("vocab only")();
  make_model(o);
  const LoadedModel model = load_gguf_model(o.path, "m");
  // The tokenizer keys alone, as converters write vocab-only files: no tensors at all.
  const TokenizerSpec& t = model.tokenizer;
  gguf::Writer w;
  w.set("general.architecture", "llama");
  w.set("tokenizer.ggml.model", t.model);
  w.set_array("tokenizer.ggml.tokens", t.tokens);
  w.set_array("tokenizer.ggml.scores", t.scores);
  w.set_array("tokenizer.ggml.token_type", t.token_types);
  w.set("tokenizer.ggml.bos_token_id", uint32_t(t.bos));
  w.set("tokenizer.ggml.eos_token_id", uint32_t(t.eos));
  const std::string vocab_only = dir.file("vocab.gguf");
  w.write(vocab_only);
  auto file = gguf::File::open(vocab_only);
  REQUIRE(file->tensors().empty());
  const Tokenizer from_vocab(read_tokenizer_spec(*file, vocab_only, 0));
  const Tokenizer from_model(model.tokenizer);
  for (const std::string text : {"Once upon a time", "a b  c\n<s>x", "12345 the end."}) {
    REQUIRE(from_vocab.encode(text, true, true) == from_model.encode(text, true, true));
  }
  // Special ids that point past the tokens are refused by key, with the file's path first.
  gguf::Writer bad = w;
  bad.set("tokenizer.ggml.eos_token_id", uint32_t(t.tokens.size()));
  bad.write(vocab_only);
  auto bad_file = gguf::File::open(vocab_only);
  REQUIRE_THROWS_WITH(read_tokenizer_spec(*bad_file, vocab_only, 0),
                      Catch::StartsWith(vocab_only + ": 'tokenizer.ggml.eos_token_id' is"));
}

}  // namespace runtime_gguf_model_tests
