#include "runtime/logit_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace tokenhost {

namespace {

constexpr char kMagic[8] = {'T', 'H', 'L', 'O', 'G', 'I', 'T', '1'};
constexpr double kFloorBelowBest = 30.0;

template <typename T>
void put(std::ofstream& out, const T& v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

LogitFileWriter::LogitFileWriter(std::string path, const LogitFileShape& shape, const std::vector<int32_t>& tokens)
    : path_(std::move(path)), partial_(path_ + ".partial"), shape_(shape) {
  if (tokens.size() != size_t(shape.n_chunks) * shape.n_ctx)
    throw std::invalid_argument("logit file " + path_ + ": " + std::to_string(tokens.size()) + " tokens for " +
                                std::to_string(shape.n_chunks) + " chunks of " + std::to_string(shape.n_ctx));
  out_.open(partial_, std::ios::binary | std::ios::trunc);
  if (!out_) throw std::runtime_error("cannot write " + partial_ + ": " + std::strerror(errno));
  out_.write(kMagic, sizeof kMagic);
  for (uint32_t v : {shape.vocab, shape.n_ctx, shape.n_chunks, shape.first, shape.rows_per_chunk}) put(out_, v);
  out_.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * sizeof(int32_t)));
}

LogitFileWriter::~LogitFileWriter() {
  if (finished_) return;
  out_.close();
  std::error_code ec;
  std::filesystem::remove(partial_, ec);
}

void LogitFileWriter::add_row(const std::vector<double>& log_probs) {
  if (log_probs.size() != shape_.vocab)
    throw std::invalid_argument("logit file " + path_ + ": a row of " + std::to_string(log_probs.size()) + " values for a vocabulary of " +
                                std::to_string(shape_.vocab));
  const double best = *std::max_element(log_probs.begin(), log_probs.end());
  const double floor = std::max(*std::min_element(log_probs.begin(), log_probs.end()), best - kFloorBelowBest);
  const double step = best > floor ? (best - floor) / 65535.0 : 1.0;
  put(out_, float(floor));
  put(out_, float(step));
  std::vector<uint16_t> values(log_probs.size());
  for (size_t i = 0; i < log_probs.size(); ++i)
    values[i] = uint16_t(std::lround(std::clamp((log_probs[i] - double(float(floor))) / double(float(step)), 0.0, 65535.0)));
  out_.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * sizeof(uint16_t)));
  ++rows_;
  if (!out_) throw std::runtime_error("writing " + partial_ + " failed: " + std::strerror(errno));
}

void LogitFileWriter::finish() {
  const uint64_t expected = uint64_t(shape_.n_chunks) * shape_.rows_per_chunk;
  if (rows_ != expected)
    throw std::logic_error("logit file " + path_ + ": " + std::to_string(rows_) + " rows written of " + std::to_string(expected));
  out_.flush();
  out_.close();
  if (!out_) throw std::runtime_error("writing " + partial_ + " failed: " + std::strerror(errno));
  std::filesystem::rename(partial_, path_);
  finished_ = true;
}

LogitFileReader::LogitFileReader(std::string path) : path_(std::move(path)) {
  in_.open(path_, std::ios::binary);
  if (!in_) throw std::invalid_argument("cannot read " + path_ + ": " + std::strerror(errno));
  char magic[8] = {};
  in_.read(magic, sizeof magic);
  if (!in_ || std::memcmp(magic, kMagic, sizeof kMagic) != 0)
    throw std::invalid_argument(path_ + " is not a file of saved distributions (tokenhost perplexity --kl-divergence-base writes one)");
  uint32_t v[5];
  in_.read(reinterpret_cast<char*>(v), sizeof v);
  shape_ = {v[0], v[1], v[2], v[3], v[4]};
  // Bounds far past any real run keep the sizes below from overflowing.
  if (!in_ || shape_.vocab == 0 || shape_.vocab > (1u << 24) || shape_.n_ctx == 0 || shape_.n_ctx > (1u << 24) ||
      shape_.n_chunks > (1u << 24) || shape_.rows_per_chunk == 0 || uint64_t(shape_.first) + shape_.rows_per_chunk > shape_.n_ctx)
    throw std::invalid_argument(path_ + ": a damaged header");
  const unsigned __int128 row_bytes = 8 + 2 * uint64_t(shape_.vocab);
  const unsigned __int128 wide = 8 + sizeof v + 4 * (unsigned __int128)shape_.n_chunks * shape_.n_ctx +
                                 (unsigned __int128)shape_.n_chunks * shape_.rows_per_chunk * row_bytes;
  const uint64_t expected = wide > UINT64_MAX ? UINT64_MAX : uint64_t(wide);
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path_, ec);
  if (ec || size != expected)
    throw std::invalid_argument(path_ + " holds " + std::to_string(size) + " bytes where its header promises " + std::to_string(expected) +
                                " (truncated or damaged)");
  tokens_.resize(size_t(shape_.n_chunks) * shape_.n_ctx);
  in_.read(reinterpret_cast<char*>(tokens_.data()), std::streamsize(tokens_.size() * sizeof(int32_t)));
}

std::vector<double> LogitFileReader::next_row() {
  if (rows_read_ >= uint64_t(shape_.n_chunks) * shape_.rows_per_chunk)
    throw std::logic_error(path_ + ": every row was read");
  float floor = 0, step = 0;
  in_.read(reinterpret_cast<char*>(&floor), sizeof floor);
  in_.read(reinterpret_cast<char*>(&step), sizeof step);
  std::vector<uint16_t> values(shape_.vocab);
  in_.read(reinterpret_cast<char*>(values.data()), std::streamsize(values.size() * sizeof(uint16_t)));
  if (!in_) throw std::invalid_argument(path_ + ": reading row " + std::to_string(rows_read_) + " failed");
  ++rows_read_;
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = double(floor) + double(values[i]) * double(step);
  return out;
}

}  // namespace tokenhost
