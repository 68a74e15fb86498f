// Quantized copies of GGUF models: which tensors are converted and which are kept (and why), values within
// each type's error bound of the source, metadata copied byte for byte, the file written whole.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "files.hpp"
#include "model/gguf.hpp"
#include "model/gguf_quantize.hpp"
#include "model/quant.hpp"
#include "models.hpp"
#include "quant_bounds.hpp"
#include "runtime/make_model.hpp"

namespace model_gguf_quantize_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

std::vector<float> rows_of(const gguf::File::Tensor& t) {
  const int64_t n = t.ne[0];
  const size_t rows = t.bytes / quant::row_bytes(t.type, n);
  std::vector<float> out(size_t(n) * rows);
  for (size_t r = 0; r < rows; ++r)
    quant::dequantize_row(t.type, t.data + r * quant::row_bytes(t.type, n), out.data() + r * size_t(n), n);
  return out;
}

// Every tensor of `out` against `in`: converted ones within the type's bound of the source's floats, kept
// ones identical; and the report says which is which.
void check_copy(const gguf::File& in, const gguf::File& out, th_dtype type, const gguf::QuantizeReport& report) {
  REQUIRE(out.tensors().size() == in.tensors().size());
  REQUIRE(report.tensors.size() == in.tensors().size());
  const size_t block = quant::block_elems(type);
  for (size_t k = 0; k < in.tensors().size(); ++k) {
    const auto& a = in.tensors()[k];
    const auto& b = out.tensors()[k];
    INFO(a.name);
    REQUIRE(b.name == a.name);
    REQUIRE(b.ne == a.ne);
    REQUIRE(report.tensors[k].name == a.name);
    const bool fits = a.ne.size() >= 2 && a.ne[0] % int64_t(block) == 0;
    if (!fits) {
      CHECK(b.type == a.type);
      REQUIRE(b.bytes == a.bytes);
      CHECK(std::memcmp(a.data, b.data, a.bytes) == 0);
      CHECK_FALSE(report.tensors[k].kept_because.empty());
      continue;
    }
    REQUIRE(b.type == type);
    CHECK(report.tensors[k].kept_because.empty());
    const std::vector<float> x = rows_of(a), y = rows_of(b);
    const std::vector<double> bound = error_bounds(type, x);
    for (size_t i = 0; i < x.size(); ++i)
      if (!(std::fabs(double(y[i]) - x[i]) <= bound[i])) FAIL("element " << i << ": " << x[i] << " -> " << y[i]);
  }
}

}  // namespace

TEST_CASE("quantize: stories260K to q8_0 and q4_0 converts the matrices whose rows fit, keeps the rest and says why",
          "[quantize]") {
  const std::string model = require_model_file("stories260K.gguf");
  TempDir dir;
  for (th_dtype type : {TH_DTYPE_Q8_0, TH_DTYPE_Q4_0}) {
    INFO(quant::dtype_name(type));
    const std::string path = dir.file("out.gguf");
    const gguf::QuantizeReport report = gguf::quantize_file(model, path, type);
    const auto in = gguf::File::open(model);
    const auto out = gguf::File::open(path);
    check_copy(*in, *out, type, report);
    // The feed-forward's down projection reads rows of 172 (its hidden width): not a multiple of 32.
    size_t kept_down = 0;
    for (const auto& t : report.tensors)
      if (t.name.find("ffn_down") != std::string::npos) {
        CHECK_THAT(t.kept_because, Catch::Contains("rows of 172 elements are not a multiple"));
        ++kept_down;
      }
    CHECK(kept_down == size_t(in->get_int("llama.block_count").value()));
    CHECK(report.converted() > 0);
    CHECK(report.bytes_out < report.bytes_in);
    // Metadata: every key, the same bytes, except the two that say what the file now holds.
    for (const std::string& key : in->keys()) {
      if (key == "general.file_type") continue;
      const auto* a = in->value(key);
      const auto* b = out->value(key);
      REQUIRE(b != nullptr);
      CHECK(a->type == b->type);
      REQUIRE(a->encoded_bytes == b->encoded_bytes);
      CHECK(std::memcmp(a->encoded, b->encoded, a->encoded_bytes) == 0);
    }
    CHECK(out->get_int("general.file_type") == (type == TH_DTYPE_Q8_0 ? 7 : 2));
    CHECK(out->get_int("general.quantization_version") == 2);
  }
}

TEST_CASE("quantize: K-quants convert a model whose rows are multiples of 256, and keep every tensor of stories260K",
          "[quantize]") {
  TempDir dir;
  MakeModelOptions o;
  o.path = dir.file("wide.gguf");
  o.shape.dim = 256;
  o.shape.n_layers = 1;
  o.shape.n_heads = 4;
  o.shape.n_kv_heads = 2;
  o.shape.ffn_dim = 512;
  o.shape.vocab_size = 300;
  o.seed = std::random_device{}();
  INFO("seed " << o.seed);
  make_model(o);
  for (th_dtype type : {TH_DTYPE_Q4_K, TH_DTYPE_Q6_K}) {
    INFO(quant::dtype_name(type));
    const std::string path = dir.file("out.gguf");
    const auto report = gguf::quantize_file(o.path, path, type);
    check_copy(*gguf::File::open(o.path), *gguf::File::open(path), type, report);
    CHECK(report.converted() > 0);
  }
  const std::string model = require_model_file("stories260K.gguf");
  const auto report = gguf::quantize_file(model, dir.file("k.gguf"), TH_DTYPE_Q4_K);
  CHECK(report.converted() == 0);
  for (const auto& t : report.tensors) CHECK_FALSE(t.kept_because.empty());
}

TEST_CASE("quantize: a quantized source is requantized, a tensor already of the type is kept, values beyond the "
          "quantizer's range are kept and named",
          "[quantize]") {
  TempDir dir;
  gguf::Writer w;
  w.set("general.architecture", "test");
  std::vector<float> plain(64 * 2), huge(64 * 2, 1.0f);
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> dist;
  for (float& v : plain) v = dist(rng);
  huge[70] = 3e7f;
  std::vector<uint8_t> q8(quant::row_bytes(TH_DTYPE_Q8_0, 64) * 2), q4(quant::row_bytes(TH_DTYPE_Q4_0, 64) * 2);
  for (int r = 0; r < 2; ++r) {
    quant::quantize_row(TH_DTYPE_Q8_0, plain.data() + 64 * r, q8.data() + r * q8.size() / 2, 64);
    quant::quantize_row(TH_DTYPE_Q4_0, plain.data() + 64 * r, q4.data() + r * q4.size() / 2, 64);
  }
  w.add_tensor("from_q8.weight", TH_DTYPE_Q8_0, {64, 2}, q8.data(), q8.size());
  w.add_tensor("already.weight", TH_DTYPE_Q4_0, {64, 2}, q4.data(), q4.size());
  w.add_tensor("huge.weight", TH_DTYPE_F32, {64, 2}, huge.data(), huge.size() * sizeof(float));
  w.add_tensor("norm.weight", TH_DTYPE_F32, {64}, plain.data(), 64 * sizeof(float));
  w.write(dir.file("in.gguf"));
  const auto report = gguf::quantize_file(dir.file("in.gguf"), dir.file("out.gguf"), TH_DTYPE_Q4_0);
  REQUIRE(report.tensors.size() == 4);
  CHECK(report.tensors[0].kept_because.empty());
  CHECK(report.tensors[0].to == TH_DTYPE_Q4_0);
  CHECK(report.tensors[1].kept_because == "already q4_0");
  CHECK_THAT(report.tensors[2].kept_because, Catch::Contains("row 1 holds") && Catch::Contains("below 1e6"));
  CHECK_THAT(report.tensors[3].kept_because, Catch::StartsWith("one-dimensional"));
  // The requantized tensor: within q4_0's bound of the q8_0 source's values.
  const auto in = gguf::File::open(dir.file("in.gguf"));
  const auto out = gguf::File::open(dir.file("out.gguf"));
  const std::vector<float> x = rows_of(in->tensors()[0]), y = rows_of(out->tensors()[0]);
  const std::vector<double> bound = error_bounds(TH_DTYPE_Q4_0, x);
  for (size_t i = 0; i < x.size(); ++i) CHECK(std::fabs(double(y[i]) - x[i]) <= bound[i]);
}

TEST_CASE("quantize: refuses a type that is not a quantization target and leaves no file for an unreadable input",
          "[quantize]") {
  TempDir dir;
  CHECK_THROWS_WITH(gguf::quantize_file("x.gguf", dir.file("o.gguf"), TH_DTYPE_F16), Catch::Contains("cannot quantize to f16"));
  const std::string junk = "GGUF but not really";
  write_file(dir.file("bad.gguf"), reinterpret_cast<const uint8_t*>(junk.data()), junk.size());
  CHECK_THROWS_AS(gguf::quantize_file(dir.file("bad.gguf"), dir.file("o.gguf"), TH_DTYPE_Q8_0), gguf::Error);
  CHECK_FALSE(std::filesystem::exists(dir.file("o.gguf")));
}

}  // namespace model_gguf_quantize_tests
