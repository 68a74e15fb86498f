#include "model/gguf_quantize.hpp"

#include <cmath>
#include <stdexcept>

#include "model/gguf.hpp"
#include "model/quant.hpp"

namespace tokenhost::gguf {
namespace {

// llama.cpp's llama_ftype for a model of mostly this type (general.file_type).
uint32_t llama_file_type(th_dtype type) {
  switch (type) {
    case TH_DTYPE_Q4_0:
      return 2;  // LLAMA_FTYPE_MOSTLY_Q4_0
    case TH_DTYPE_Q8_0:
      return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
    case TH_DTYPE_Q4_K:
      return 14;  // LLAMA_FTYPE_MOSTLY_Q4_K_S: every quantized matrix q4_K
    case TH_DTYPE_Q6_K:
      return 18;  // LLAMA_FTYPE_MOSTLY_Q6_K
    default:
      throw std::invalid_argument("no llama.cpp file type for " + std::string(quant::dtype_name(type)));
  }
}

constexpr float kLargestQuantizable = 1e6f;  // quant.hpp: the quantizers' input range

}  // namespace

size_t QuantizeReport::converted() const {
  size_t n = 0;
  for (const auto& t : tensors) n += t.kept_because.empty();
  return n;
}

bool is_quantize_target(th_dtype type) {
  return type == TH_DTYPE_Q8_0 || type == TH_DTYPE_Q4_0 || type == TH_DTYPE_Q4_K || type == TH_DTYPE_Q6_K;
}

QuantizeReport quantize_file(const std::string& in, const std::string& out, th_dtype type,
                             const std::function<void(size_t, size_t)>& progress,
                             const std::map<std::string, std::string>& set_strings) {
  if (!is_quantize_target(type))
    throw std::invalid_argument("cannot quantize to " + std::string(quant::dtype_name(type)) + " (q8_0, q4_0, q4_K, q6_K)");
  const auto file = File::open(in);
  Writer w;
  for (const std::string& key : file->keys()) w.copy_value(key, *file);
  w.set("general.file_type", llama_file_type(type));
  w.set("general.quantization_version", uint32_t(2));  // ggml's block layouts as of GGUF v3
  for (const auto& [key, value] : set_strings) w.set(key, value);

  QuantizeReport report;
  const size_t block = quant::block_elems(type);
  const auto& tensors = file->tensors();
  std::vector<float> row;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const File::Tensor& t = tensors[k];
    QuantizedTensor r{t.name, t.type, t.type, ""};
    const int64_t n = t.ne[0];
    const size_t rows = t.bytes / quant::row_bytes(t.type, n);
    if (t.ne.size() < 2) {
      r.kept_because = "one-dimensional (a norm or bias): kept in full precision";
    } else if (t.type == type) {
      r.kept_because = std::string("already ") + quant::dtype_name(type);
    } else if (n % int64_t(block) != 0) {
      r.kept_because = "its rows of " + std::to_string(n) + " elements are not a multiple of the " +
                       quant::dtype_name(type) + " block (" + std::to_string(block) + ")";
    }
    std::vector<uint8_t> converted;
    if (r.kept_because.empty()) {
      row.resize(size_t(n));
      converted.resize(quant::row_bytes(type, n) * rows);
      const size_t in_row = quant::row_bytes(t.type, n), out_row = quant::row_bytes(type, n);
      for (size_t i = 0; i < rows && r.kept_because.empty(); ++i) {
        quant::dequantize_row(t.type, t.data + i * in_row, row.data(), n);
        for (float v : row) {
          if (!std::isfinite(v) || std::fabs(v) >= kLargestQuantizable) {
            r.kept_because = "row " + std::to_string(i) + " holds " + std::to_string(v) +
                             ", which the quantizer cannot represent (finite values below 1e6 only)";
            break;
          }
        }
        if (r.kept_because.empty()) quant::quantize_row(type, row.data(), converted.data() + i * out_row, n);
      }
    }
    if (r.kept_because.empty()) {
      r.to = type;
      w.add_tensor(t.name, type, t.ne, converted.data(), converted.size());
      report.bytes_out += converted.size();
    } else {
      w.add_tensor(t.name, t.type, t.ne, t.data, t.bytes);
      report.bytes_out += t.bytes;
    }
    report.bytes_in += t.bytes;
    report.tensors.push_back(std::move(r));
    if (progress) progress(k + 1, tensors.size());
  }
  w.write(out);
  return report;
}

}  // namespace tokenhost::gguf
