#include "cli/quantize_command.hpp"

#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "model/gguf_quantize.hpp"
#include "model/quant.hpp"
#include "util/atomic_file.hpp"
#include "util/progress.hpp"

namespace tokenhost {

CLI::App* add_quantize_command(CLI::App& app, QuantizeOptions& o) {
  auto* cmd = app.add_subcommand(
      "quantize",
      "Write a quantized copy of a GGUF model. Every matrix whose rows are a multiple of the type's\n"
      "block (32 elements for q8_0 and q4_0, 256 for q4_K and q6_K) is quantized; the others, and the\n"
      "one-dimensional tensors (norms), keep their type and are listed with the reason. The metadata\n"
      "(tokenizer included) is copied as it is. The copy is built in memory, then written at once.");
  cmd->add_option("input", o.in, "GGUF model to read")->required()->check(CLI::ExistingFile);
  cmd->add_option("output", o.out, "GGUF file to write (replaced whole, never left half-written)")->required();
  cmd->add_option("--type", o.type, "q8_0, q4_0, q4_K or q6_K")->required();
  cmd->add_option("--chat-template", o.chat_template,
                  "a file whose text the copy carries as its chat template (tokenizer.chat_template), in place of the source's")
      ->check(CLI::ExistingFile);
  return cmd;
}

int run_quantize(const QuantizeOptions& o) {
  const th_dtype type = quant::supported_dtype(o.type, true);
  if (type < 0 || !gguf::is_quantize_target(type))
    throw std::invalid_argument("--type '" + o.type + "' is not one of q8_0, q4_0, q4_K, q6_K");
  std::error_code ec;
  if (std::filesystem::equivalent(o.in, o.out, ec))
    throw std::invalid_argument("the output " + o.out + " is the input: write the copy elsewhere");
  Progress progress("quantizing tensors");
  gguf::QuantizeReport report;
  try {
    std::map<std::string, std::string> strings;
    if (!o.chat_template.empty()) strings["tokenizer.chat_template"] = read_file(o.chat_template);
    report = gguf::quantize_file(o.in, o.out, type, [&progress](size_t done, size_t total) {
      progress(total == 0 ? 1.0 : double(done) / double(total));
    }, strings);
  } catch (...) {
    progress.done();
    throw;
  }
  progress.done();
  // The kept tensors, grouped by reason (a reason names the row width, so blocks of layers group).
  std::map<std::string, std::vector<std::string>> kept;
  size_t one_dimensional = 0;
  for (const auto& t : report.tensors) {
    if (t.kept_because.empty()) continue;
    if (t.kept_because.rfind("one-dimensional", 0) == 0) {
      ++one_dimensional;
      continue;
    }
    kept[std::string(quant::dtype_name(t.from)) + ", " + t.kept_because].push_back(t.name);
  }
  for (const auto& [why, names] : kept) {
    std::printf("kept in %s:\n", why.c_str());
    for (const auto& n : names) std::printf("  %s\n", n.c_str());
  }
  const size_t matrices = report.tensors.size() - one_dimensional;
  std::printf("%s: %zu of %zu matrices quantized to %s, %zu kept; %zu one-dimensional tensors in full precision; "
              "tensor data %.2f MiB -> %.2f MiB\n",
              o.out.c_str(), report.converted(), matrices, quant::dtype_name(type), matrices - report.converted(),
              one_dimensional, double(report.bytes_in) / (1 << 20), double(report.bytes_out) / (1 << 20));
  if (report.converted() == 0)
    std::fprintf(stderr, "warning: no matrix of this model fits %s's blocks: the copy holds the same tensors\n",
                 quant::dtype_name(type));
  return 0;
}

}  // namespace tokenhost
