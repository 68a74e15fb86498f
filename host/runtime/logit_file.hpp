// The distributions a perplexity run saves for a later run to compare with (tokenhost perplexity
// --kl-divergence-base / --kl-divergence). One file: a header naming the run's shape, the tokens of its
// chunks, then for every scored position its log-probabilities over the vocabulary in 16 bits (a
// row's values quantized linearly between its floor and its best, the floor at most 30 nats under it:
// probabilities below e^-30 of the best count as that, an error of at most 0.00023 nats elsewhere).
//
// Layout, little-endian: "THLOGIT1", u32 vocab, u32 n_ctx, u32 n_chunks, u32 first (the first scored
// row of a chunk), u32 rows per chunk, i32 tokens[n_chunks * n_ctx], then per row f32 floor, f32 step,
// u16 values[vocab] (log p = floor + value * step).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace tokenhost {

struct LogitFileShape {
  uint32_t vocab = 0, n_ctx = 0, n_chunks = 0, first = 0, rows_per_chunk = 0;
};

// Writes to PATH.partial and renames it to PATH once every row is in: no half-written file is left
// under the name. Throws std::runtime_error naming the path when writing fails.
class LogitFileWriter {
 public:
  LogitFileWriter(std::string path, const LogitFileShape& shape, const std::vector<int32_t>& tokens);
  ~LogitFileWriter();  // removes the partial file when finish() was not reached
  void add_row(const std::vector<double>& log_probs);
  void finish();  // checks the row count, flushes and renames

 private:
  std::string path_, partial_;
  LogitFileShape shape_;
  std::ofstream out_;
  uint64_t rows_ = 0;
  bool finished_ = false;
};

// Reads a file LogitFileWriter wrote; throws std::invalid_argument naming the path and what is wrong
// (not such a file, truncated, a shape or tokens other than the run's).
class LogitFileReader {
 public:
  explicit LogitFileReader(std::string path);
  const LogitFileShape& shape() const { return shape_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // The next row's log-probabilities.
  std::vector<double> next_row();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ifstream in_;
  LogitFileShape shape_;
  std::vector<int32_t> tokens_;
  uint64_t rows_read_ = 0;
};

}  // namespace tokenhost
