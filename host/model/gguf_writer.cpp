// GGUF v3 writer.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "model/gguf.hpp"
#include "model/quant.hpp"

namespace tokenhost::gguf {
namespace {

template <class T>
void append(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

void append_string(std::vector<uint8_t>& out, const std::string& s) {
  append<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

// Closes and removes the temporary file unless committed.
struct TempFile {
  std::string path;
  int fd = -1;
  bool committed = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!committed && !path.empty()) ::unlink(path.c_str());
  }
};

}  // namespace

// ---- metadata ----------------------------------------------------------------------------------

void Writer::put(const std::string& key, Entry e) {
  if (key == "general.alignment") {
    const int64_t a = e.integer.value_or(0);
    if (a <= 0 || a > (int64_t(1) << 30) || (a & (a - 1)) != 0) {
      throw std::invalid_argument("general.alignment must be an integer power of two between 1 and 2^30");
    }
  }
  auto it = kv_index_.find(key);
  if (it != kv_index_.end()) {
    kv_[it->second].second = std::move(e);
  } else {
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(key, std::move(e));
  }
}

void Writer::set(const std::string& key, int64_t v) {
  Entry e{ValueType::INT64};
  append(e.payload, v);
  e.integer = v;
  put(key, std::move(e));
}
void Writer::set(const std::string& key, int32_t v) {
  Entry e{ValueType::INT32};
  append(e.payload, v);
  e.integer = v;
  put(key, std::move(e));
}
void Writer::set(const std::string& key, uint64_t v) {
  Entry e{ValueType::UINT64};
  append(e.payload, v);
  if (v <= uint64_t(std::numeric_limits<int64_t>::max())) e.integer = int64_t(v);
  put(key, std::move(e));
}
void Writer::set(const std::string& key, uint32_t v) {
  Entry e{ValueType::UINT32};
  append(e.payload, v);
  e.integer = v;
  put(key, std::move(e));
}
void Writer::set(const std::string& key, float v) {
  Entry e{ValueType::FLOAT32};
  append(e.payload, v);
  put(key, std::move(e));
}
void Writer::set(const std::string& key, double v) {
  Entry e{ValueType::FLOAT64};
  append(e.payload, v);
  put(key, std::move(e));
}
void Writer::set(const std::string& key, bool v) {
  Entry e{ValueType::BOOL};
  append<uint8_t>(e.payload, v ? 1 : 0);
  put(key, std::move(e));
}
void Writer::set(const std::string& key, const std::string& v) {
  Entry e{ValueType::STRING};
  append_string(e.payload, v);
  put(key, std::move(e));
}
void Writer::set(const std::string& key, const char* v) { set(key, std::string(v)); }

void Writer::set_array(const std::string& key, const std::vector<std::string>& v) {
  Entry e{ValueType::ARRAY, ValueType::STRING};
  append(e.payload, uint32_t(ValueType::STRING));
  append<uint64_t>(e.payload, v.size());
  for (const std::string& s : v) append_string(e.payload, s);
  put(key, std::move(e));
}
void Writer::set_array(const std::string& key, const std::vector<float>& v) {
  Entry e{ValueType::ARRAY, ValueType::FLOAT32};
  append(e.payload, uint32_t(ValueType::FLOAT32));
  append<uint64_t>(e.payload, v.size());
  for (float x : v) append(e.payload, x);
  put(key, std::move(e));
}
void Writer::set_array(const std::string& key, const std::vector<int32_t>& v) {
  Entry e{ValueType::ARRAY, ValueType::INT32};
  append(e.payload, uint32_t(ValueType::INT32));
  append<uint64_t>(e.payload, v.size());
  for (int32_t x : v) append(e.payload, x);
  put(key, std::move(e));
}

void Writer::copy_value(const std::string& key, const File& from) {
  const File::Value* v = from.value(key);
  if (v == nullptr) throw std::invalid_argument(from.path() + " has no metadata key '" + key + "'");
  Entry e{v->type, v->elem_type};
  e.payload.assign(v->encoded, v->encoded + v->encoded_bytes);
  if (key == "general.alignment") e.integer = from.get_int(key);  // the reader has checked it is one
  put(key, std::move(e));
}

uint32_t Writer::alignment() const {
  auto it = kv_index_.find("general.alignment");
  return it == kv_index_.end() ? kDefaultAlignment : uint32_t(*kv_[it->second].second.integer);
}

// ---- tensors -----------------------------------------------------------------------------------

void Writer::add_tensor(const std::string& name, th_dtype type, std::vector<int64_t> ne, const void* data,
                        size_t bytes) {
  const std::string at = "tensor '" + name + "'";
  if (name.empty()) throw std::invalid_argument("a tensor needs a name");
  if (tensor_index_.count(name) != 0) throw std::invalid_argument(at + " was already added");
  if (!quant::is_supported(type)) {
    throw std::invalid_argument(at + ": element type " + quant::dtype_name(type) + " is not supported");
  }
  if (ne.empty() || ne.size() > kMaxDims) {
    throw std::invalid_argument(at + " has " + std::to_string(ne.size()) + " dimensions (1 to 4 supported)");
  }
  uint64_t rows = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 1) throw std::invalid_argument(at + " dimension " + std::to_string(d) + " is " + std::to_string(ne[d]));
    if (d > 0) {
      if (rows > uint64_t(std::numeric_limits<int64_t>::max()) / uint64_t(ne[d])) {
        throw std::invalid_argument(at + " has too many elements");
      }
      rows *= uint64_t(ne[d]);
    }
  }
  const size_t row = quant::row_bytes(type, ne[0]);  // throws for a partial block
  if (rows > std::numeric_limits<size_t>::max() / row || rows * row != bytes) {
    throw std::invalid_argument(at + ": " + std::to_string(bytes) + " bytes of data given, the shape needs " +
                                (rows > std::numeric_limits<size_t>::max() / row ? std::string("more than 2^64")
                                                                                 : std::to_string(rows * row)));
  }
  PendingTensor t{name, type, std::move(ne), {}};
  const auto* p = static_cast<const uint8_t*>(data);
  t.data.assign(p, p + bytes);
  tensor_index_.emplace(name, tensors_.size());
  tensors_.push_back(std::move(t));
}

// ---- output ------------------------------------------------------------------------------------

template <class Sink>
void Writer::serialize(Sink&& sink) const {
  const uint64_t align = alignment();
  std::vector<uint8_t> head;
  append(head, kMagic);
  append<uint32_t>(head, 3);
  append<uint64_t>(head, tensors_.size());
  append<uint64_t>(head, kv_.size());
  for (const auto& [key, e] : kv_) {
    append_string(head, key);
    append(head, uint32_t(e.type));
    head.insert(head.end(), e.payload.begin(), e.payload.end());
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    append_string(head, t.name);
    append(head, uint32_t(t.ne.size()));
    for (int64_t n : t.ne) append(head, uint64_t(n));
    append(head, uint32_t(t.type));
    append(head, offset);
    offset = align_up(offset + t.data.size(), align);
  }
  head.resize(size_t(align_up(head.size(), align)), 0);
  sink(head.data(), head.size());
  const std::vector<uint8_t> zeros(size_t(align), 0);
  for (const PendingTensor& t : tensors_) {
    sink(t.data.data(), t.data.size());
    sink(zeros.data(), size_t(align_up(t.data.size(), align) - t.data.size()));
  }
}

std::vector<uint8_t> Writer::bytes() const {
  std::vector<uint8_t> out;
  serialize([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

void Writer::write(const std::string& path) const {
  auto fail = [&](const std::string& what, int err) {
    throw Error(path + ": " + what + (err ? std::string(": ") + std::strerror(err) : std::string()));
  };
  TempFile tmp;
  std::string templ = path + ".tmp.XXXXXX";  // same folder, so that rename() is atomic
  tmp.fd = ::mkstemp(templ.data());
  if (tmp.fd < 0) fail("cannot create a temporary file beside it", errno);
  tmp.path = templ;
  ::fchmod(tmp.fd, 0644);
  serialize([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    while (n > 0) {
      const ssize_t w = ::write(tmp.fd, b, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail("cannot write " + tmp.path, w < 0 ? errno : EIO);
      b += w;
      n -= size_t(w);
    }
  });
  if (::fsync(tmp.fd) != 0) fail("cannot flush " + tmp.path, errno);
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) fail("cannot close " + tmp.path, errno);
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) fail("cannot rename " + tmp.path + " to it", errno);
  tmp.committed = true;
}

}  // namespace tokenhost::gguf
