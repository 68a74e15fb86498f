// llama.cpp's tokenizer suite (../shared/vocab, see its SOURCES.md): for each vocabulary-only GGUF file,
// every input of its .inp file tokenized (no BOS, special tokens as text, as llama.cpp's
// test-tokenizer-0 does) equals the ids on its line of the .out file. $TOKENHOST_VOCAB names another
// folder; a test whose files are absent is skipped.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/tokenizer.hpp"
#include "runtime/gguf_model.hpp"
#include "skip.hpp"

namespace {

using namespace tokenhost;

std::string vocab_dir() {
  if (const char* env = std::getenv("TOKENHOST_VOCAB")) return env;
  return std::string(TOKENHOST_SOURCE_DIR) + "/../shared/vocab";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The .inp file's inputs, as test-tokenizer-0 splits them.
std::vector<std::string> read_inputs(const std::string& path) {
  const std::string raw = read_file(path), sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return inputs;
}

std::vector<std::vector<int32_t>> read_outputs(const std::string& path) {
  std::istringstream in(read_file(path));
  std::vector<std::vector<int32_t>> outputs;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ids(line);
    outputs.emplace_back();
    for (int32_t id; ids >> id;) outputs.back().push_back(id);
  }
  return outputs;
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

void check_vocabulary(const std::string& name) {
  const std::string base = vocab_dir() + "/ggml-vocab-" + name + ".gguf";
  if (!std::filesystem::exists(base) || !std::filesystem::exists(base + ".inp"))
    testing::skip_test(base + " (and its .inp/.out cases) not found (set TOKENHOST_VOCAB to the folder that holds them)");
  auto file = gguf::File::open(base);
  const Tokenizer tokenizer(read_tokenizer_spec(*file, base, 0));
  const auto inputs = read_inputs(base + ".inp");
  const auto outputs = read_outputs(base + ".out");
  REQUIRE(inputs.size() == outputs.size());
  REQUIRE(inputs.size() >= 30);
  size_t matched = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> ids = tokenizer.encode(inputs[i], /*add_bos=*/false, /*parse_special=*/false);
    INFO(name << " case " << i << ": '" << inputs[i] << "'");
    CHECK(ids_text(ids) == ids_text(outputs[i]));
    matched += ids == outputs[i];
  }
  WARN(name << ": " << matched << " of " << inputs.size() << " cases equal llama.cpp's");
}

}  // namespace

TEST_CASE("vocab suite: llama-spm (SentencePiece)", "[tokenizer][vocab]") { check_vocabulary("llama-spm"); }
TEST_CASE("vocab suite: phi-3 (SentencePiece)", "[tokenizer][vocab]") { check_vocabulary("phi-3"); }
TEST_CASE("vocab suite: mpt (BPE mpt pre-tokenizer)", "[tokenizer][vocab]") { check_vocabulary("mpt"); }
TEST_CASE("vocab suite: gpt-2 (BPE gpt-2 pre-tokenizer)", "[tokenizer][vocab]") { check_vocabulary("gpt-2"); }
TEST_CASE("vocab suite: falcon (BPE falcon pre-tokenizer)", "[tokenizer][vocab]") { check_vocabulary("falcon"); }
TEST_CASE("vocab suite: starcoder (BPE starcoder pre-tokenizer)", "[tokenizer][vocab]") { check_vocabulary("starcoder"); }
TEST_CASE("vocab suite: refact (BPE refact pre-tokenizer)", "[tokenizer][vocab]") { check_vocabulary("refact"); }
TEST_CASE("vocab suite: deepseek-llm (BPE deepseek-llm pre-tokenizer)", "[tokenizer][vocab]") { check_vocabulary("deepseek-llm"); }
TEST_CASE("vocab suite: deepseek-coder (BPE deepseek-coder pre-tokenizer)", "[tokenizer][vocab]") { check_vocabulary("deepseek-coder"); }
TEST_CASE("vocab suite: bert-bge (WordPiece)", "[tokenizer][vocab]") { check_vocabulary("bert-bge"); }
