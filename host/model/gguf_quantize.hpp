// Quantized copies of GGUF models (`tokenhost quantize`): every matrix whose rows fit the type's blocks
// is converted; the rest stays as it was and is listed with the reason.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <tokenhost/th_common.h>

namespace tokenhost::gguf {

// What became of one tensor.
struct QuantizedTensor {
  std::string name;
  th_dtype from;
  th_dtype to;              // == from when kept
  std::string kept_because;  // empty when converted
};

struct QuantizeReport {
  std::vector<QuantizedTensor> tensors;  // in file order
  size_t bytes_in = 0, bytes_out = 0;    // tensor data only
  size_t converted() const;
};

// The types a model can be quantized to: q8_0, q4_0, q4_K, q6_K.
bool is_quantize_target(th_dtype type);

// Reads the GGUF model at `in` and writes a copy at `out` (atomically: a temporary file renamed into
// place) whose tensors are quantized to `type` where they can be:
// - two or more dimensions, with rows (ne[0]) a multiple of the type's block (32 or 256 elements);
// - finite values below 1e6 in magnitude (what the quantizers represent);
// - not already of `type`.
// One-dimensional tensors (norms, biases) stay in full precision, as llama.cpp's quantize keeps them.
// Rows of a quantized source are dequantized first (requantizing loses more than quantizing once).
// Metadata is copied byte for byte; general.file_type (llama.cpp's numbering) and
// general.quantization_version are set. progress(done, total) follows the tensors. Throws Error (the
// reader's and writer's) naming the file, or std::invalid_argument for a type that is not a target.
// The copy is built in memory before it is written: the output's size in memory.
// set_strings: metadata strings set in the copy (replacing the source's), e.g. tokenizer.chat_template.
QuantizeReport quantize_file(const std::string& in, const std::string& out, th_dtype type,
                             const std::function<void(size_t done, size_t total)>& progress = nullptr,
                             const std::map<std::string, std::string>& set_strings = {});

}  // namespace tokenhost::gguf
