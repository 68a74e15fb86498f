// The files the measuring tools read back: a traffic recording (serve --record, read by bench --replay)
// and a perplexity run's saved distributions (--kl-divergence-base, read by --kl-divergence). The first
// byte picks the reader. Either reader refuses with std::invalid_argument or gives what it promises:
// requests in time order from 0 with counts in range; rows of the header's vocabulary, as many as it
// says, and no more.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "loadgen/replay.hpp"
#include "runtime/logit_file.hpp"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::abort();
}

void traffic(const std::string& text) {
  std::vector<tokenhost::loadgen::ReplayRequest> requests;
  try {
    requests = tokenhost::loadgen::parse_traffic(text, "fuzz.jsonl");
  } catch (const std::invalid_argument&) {
    return;
  }
  if (requests.empty() || requests.front().at_s != 0) fail("a replay that does not start at 0");
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i > 0 && requests[i].at_s < requests[i - 1].at_s) fail("replayed requests out of time order");
    if (requests[i].output_tokens == 0 || requests[i].output_tokens > (1u << 24) || requests[i].prompt_tokens > (1u << 24))
      fail("a count out of range");
  }
}

void logits(const std::string& bytes) {
  static const std::string path = "/tmp/fuzz-logit-file-" + std::to_string(::getpid());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  try {
    tokenhost::LogitFileReader reader(path);
    const auto& shape = reader.shape();
    if (reader.tokens().size() != size_t(shape.n_chunks) * shape.n_ctx) fail("tokens of another count than the header's");
    const uint64_t rows = uint64_t(shape.n_chunks) * shape.rows_per_chunk;
    for (uint64_t r = 0; r < rows; ++r)
      if (reader.next_row().size() != shape.vocab) fail("a row of another size than the vocabulary");
    try {
      reader.next_row();
      fail("a row past the header's count");
    } catch (const std::logic_error&) {
    }
  } catch (const std::invalid_argument&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 1)
    logits(rest);
  else
    traffic(rest);
  return 0;
}
