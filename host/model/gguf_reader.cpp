// GGUF reader: every length and count is checked against the bytes left before anything is read.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "model/gguf.hpp"
#include "model/quant.hpp"

static_assert(std::endian::native == std::endian::little, "GGUF files are little-endian");

namespace tokenhost::gguf {
namespace {

// Bytes of one element of a fixed-size value type; 0 for string, array and unknown types.
size_t scalar_size(uint32_t type) {
  switch (ValueType(type)) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
      return 8;
    default:
      return 0;
  }
}

bool known_type(uint32_t type) { return type <= uint32_t(ValueType::FLOAT64); }

bool is_integer(ValueType t) {
  return scalar_size(uint32_t(t)) != 0 && t != ValueType::FLOAT32 && t != ValueType::FLOAT64 && t != ValueType::BOOL;
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// An integer (or bool) element at p. Sets `overflow` for a uint64 above INT64_MAX.
int64_t load_int(ValueType t, const uint8_t* p, bool& overflow) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::BOOL:
      return load<uint8_t>(p);
    case ValueType::INT8:
      return load<int8_t>(p);
    case ValueType::UINT16:
      return load<uint16_t>(p);
    case ValueType::INT16:
      return load<int16_t>(p);
    case ValueType::UINT32:
      return load<uint32_t>(p);
    case ValueType::INT32:
      return load<int32_t>(p);
    case ValueType::INT64:
      return load<int64_t>(p);
    case ValueType::UINT64: {
      const uint64_t v = load<uint64_t>(p);
      overflow = v > uint64_t(std::numeric_limits<int64_t>::max());
      return int64_t(v);
    }
    default:
      return 0;
  }
}

std::string type_desc(const File::Value& v) {
  if (v.type != ValueType::ARRAY) return value_type_name(v.type);
  return std::string("array of ") + value_type_name(v.elem_type);
}

std::string dtype_desc(uint32_t t) {
  return std::string(t <= 1024 ? quant::dtype_name(th_dtype(t)) : ("unknown(" + std::to_string(t) + ")").c_str()) +
         " (" + std::to_string(t) + ")";
}

// A description of what is being read: a string, or a callable that makes one (only on failure, so
// that the many elements of a vocabulary cost no string building).
template <class What>
std::string describe(const What& what) {
  if constexpr (std::is_invocable_v<const What&>) {
    return what();
  } else {
    return std::string(what);
  }
}

// Bounds-checked sequential reads over the file image.
struct Cursor {
  const std::string& path;
  const uint8_t* base;
  size_t size;
  size_t pos = 0;

  [[noreturn]] void fail(const std::string& what) const { throw Error(path + ": " + what); }

  size_t left() const { return size - pos; }
  // Fails unless n more bytes are there.
  template <class What>
  void need(uint64_t n, const What& what) const {
    if (n > left()) {
      fail(describe(what) + " at byte " + std::to_string(pos) + " needs " + std::to_string(n) +
           " bytes, but the file ends at byte " + std::to_string(size));
    }
  }
  template <class What>
  const uint8_t* take(uint64_t n, const What& what) {
    need(n, what);
    const uint8_t* p = base + pos;
    pos += size_t(n);
    return p;
  }
  template <class What>
  uint32_t u32(const What& what) {
    return load<uint32_t>(take(4, what));
  }
  template <class What>
  uint64_t u64(const What& what) {
    return load<uint64_t>(take(8, what));
  }
  // A string: its length is checked against the bytes left before its bytes are touched.
  template <class What>
  std::string_view str(const What& what) {
    const size_t at = pos;
    const uint64_t n = u64([&] { return describe(what) + " length"; });
    if (n > left()) {
      fail(describe(what) + ": string length " + std::to_string(n) + " at byte " + std::to_string(at) +
           " runs past the end of the file (" + std::to_string(size) + " bytes)");
    }
    return {reinterpret_cast<const char*>(take(n, what)), size_t(n)};
  }
};

}  // namespace

const char* value_type_name(ValueType type) {
  static const char* const kNames[] = {"uint8", "int8",   "uint16", "int16",  "uint32", "int32", "float32",
                                       "bool",  "string", "array",  "uint64", "int64",  "float64"};
  const auto i = uint32_t(type);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

// ---- open / close ------------------------------------------------------------------------------

std::unique_ptr<File> File::open(const std::string& path) {
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) f->fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    f->fail(std::string("cannot stat: ") + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    f->fail("not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    f->fail("empty file (0 bytes), not a GGUF file");
  }
  void* p = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) f->fail(std::string("cannot map ") + std::to_string(st.st_size) + " bytes: " + std::strerror(e));
  f->base_ = static_cast<const uint8_t*>(p);
  f->size_ = size_t(st.st_size);
  f->mapped_ = true;
  f->parse();
  return f;
}

std::unique_ptr<File> File::from_bytes(const std::string& name, const void* bytes, size_t size) {
  std::unique_ptr<File> f(new File());
  f->path_ = name;
  if (size == 0) f->fail("empty file (0 bytes), not a GGUF file");
  void* p = nullptr;
  if (::posix_memalign(&p, 64, size) != 0) f->fail("out of memory for a copy of " + std::to_string(size) + " bytes");
  std::memcpy(p, bytes, size);
  f->base_ = static_cast<const uint8_t*>(p);
  f->size_ = size;
  f->parse();
  return f;
}

File::~File() {
  if (base_ == nullptr) return;
  if (mapped_) {
    ::munmap(const_cast<uint8_t*>(base_), size_);
  } else {
    std::free(const_cast<uint8_t*>(base_));
  }
}

void File::fail(const std::string& what) const { throw Error(path_ + ": " + what); }

// ---- parsing -----------------------------------------------------------------------------------

void File::parse() {
  Cursor c{path_, base_, size_};

  const uint8_t* magic = c.take(4, "the magic \"GGUF\"");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
    fail(std::string("not a GGUF file: the first 4 bytes are ") + hex + ", not \"GGUF\" (47 47 55 46)");
  }
  version_ = c.u32("the version");
  if (version_ == 0x02000000 || version_ == 0x03000000) fail("big-endian GGUF files are not supported");
  if (version_ != 2 && version_ != 3) {
    fail("unsupported GGUF version " + std::to_string(version_) + " (supported: 2, 3)");
  }
  const uint64_t n_tensors = c.u64("the tensor count");
  const uint64_t n_kv = c.u64("the metadata count");
  // (No reserve() from these counts: they are not trusted until the entries have been read.)
  // Each metadata entry takes at least 13 bytes (key length, type, a 1-byte value) and each tensor
  // info at least 32 (name length, n_dims, one dimension, type, offset).
  if (n_kv > c.left() / 13) {
    fail("metadata count " + std::to_string(n_kv) + " is impossible in a file of " + std::to_string(size_) + " bytes");
  }
  if (n_tensors > (c.left() - n_kv * 13) / 32) {
    fail("tensor count " + std::to_string(n_tensors) + " is impossible in a file of " + std::to_string(size_) +
         " bytes");
  }

  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string where = "metadata entry #" + std::to_string(i);
    const std::string key(c.str(where + " key"));
    const std::string at = where + " '" + key + "'";
    if (kv_index_.count(key) != 0) fail(at + ": duplicate key");
    const size_t type_pos = c.pos;
    const uint32_t type = c.u32(at + " type");
    if (!known_type(type)) {
      fail(at + ": unknown value type " + std::to_string(type) + " at byte " + std::to_string(type_pos));
    }
    Value v{ValueType(type), ValueType::UINT8, 0, nullptr, base_ + c.pos, 0};
    if (v.type == ValueType::STRING) {
      const std::string_view s = c.str(at + " value");
      v.data = reinterpret_cast<const uint8_t*>(s.data());
      v.count = s.size();
    } else if (v.type == ValueType::ARRAY) {
      const size_t elem_pos = c.pos;
      const uint32_t elem = c.u32(at + " array element type");
      if (!known_type(elem)) {
        fail(at + ": unknown array element type " + std::to_string(elem) + " at byte " + std::to_string(elem_pos));
      }
      if (ValueType(elem) == ValueType::ARRAY) fail(at + ": arrays of arrays are not supported");
      const size_t count_pos = c.pos;
      v.elem_type = ValueType(elem);
      v.count = c.u64(at + " array count");
      const size_t elem_min = elem == uint32_t(ValueType::STRING) ? 8 : scalar_size(elem);
      if (v.count > c.left() / elem_min) {
        fail(at + ": array of " + std::to_string(v.count) + " " + value_type_name(v.elem_type) + " at byte " +
             std::to_string(count_pos) + " runs past the end of the file (" + std::to_string(size_) + " bytes)");
      }
      v.data = base_ + c.pos;
      if (v.elem_type == ValueType::STRING) {
        for (uint64_t j = 0; j < v.count; ++j) c.str([&] { return at + " element #" + std::to_string(j); });
      } else {
        c.take(v.count * elem_min, at + " array data");
      }
    } else {
      v.data = c.take(scalar_size(type), at + " value");
    }
    v.encoded_bytes = size_t(base_ + c.pos - v.encoded);
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(key, v);
  }

  if (const Value* a = find("general.alignment")) {
    bool overflow = false;
    const int64_t al = is_integer(a->type) ? load_int(a->type, a->data, overflow) : 0;
    if (!is_integer(a->type)) fail("general.alignment is a " + type_desc(*a) + ", not an integer");
    if (overflow || al <= 0 || al > (int64_t(1) << 30) || (al & (al - 1)) != 0) {
      fail("general.alignment " + (overflow ? std::to_string(load<uint64_t>(a->data)) : std::to_string(al)) +
           " is not a power of two between 1 and 2^30");
    }
    alignment_ = uint32_t(al);
  }

  for (uint64_t i = 0; i < n_tensors; ++i) {
    const std::string where = "tensor #" + std::to_string(i);
    Tensor t;
    t.name = std::string(c.str(where + " name"));
    const std::string at = "tensor '" + t.name + "'";
    if (tensor_index_.count(t.name) != 0) fail(at + ": duplicate tensor name");
    const uint32_t n_dims = c.u32(at + " dimension count");
    if (n_dims < 1 || n_dims > kMaxDims) {
      fail(at + " has " + std::to_string(n_dims) + " dimensions (1 to " + std::to_string(kMaxDims) + " supported)");
    }
    uint64_t elems = 1;
    std::string shape;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t n = c.u64(at + " dimension " + std::to_string(d));
      shape += (d ? ", " : "") + std::to_string(n);
      if (n == 0 || n > uint64_t(std::numeric_limits<int64_t>::max())) {
        fail(at + " dimension " + std::to_string(d) + " is " + std::to_string(n) + " (must be 1 to 2^63-1)");
      }
      if (elems > uint64_t(std::numeric_limits<int64_t>::max()) / n) {
        fail(at + " shape [" + shape + (d + 1 < n_dims ? ", ..." : "") + "] has more than 2^63-1 elements");
      }
      elems *= n;
      t.ne.push_back(int64_t(n));
    }
    const uint32_t type = c.u32(at + " type");
    if (!quant::is_supported(th_dtype(type))) {
      fail(at + " has element type " + dtype_desc(type) + ", which is not supported (supported: f32, f16, bf16, "
           "q8_0, q4_0, q4_K, q6_K)");
    }
    t.type = th_dtype(type);
    const size_t be = quant::block_elems(t.type);
    if (uint64_t(t.ne[0]) % be != 0) {
      fail(at + " rows of " + std::to_string(t.ne[0]) + " elements are not a whole number of " +
           quant::dtype_name(t.type) + " blocks (" + std::to_string(be) + " elements each)");
    }
    const uint64_t rows = elems / uint64_t(t.ne[0]);
    const uint64_t blocks = uint64_t(t.ne[0]) / be, block = quant::block_bytes(t.type);
    const uint64_t row = blocks * block;  // checked just below before use (it may have wrapped)
    if (blocks > uint64_t(size_) / block || rows > uint64_t(size_) / row) {
      fail(at + " shape [" + shape + "] of " + quant::dtype_name(t.type) + " needs more bytes than the whole file (" +
           std::to_string(size_) + " bytes)");
    }
    t.bytes = size_t(rows * row);
    const size_t off_pos = c.pos;
    t.offset = c.u64(at + " data offset");
    if (t.offset % alignment_ != 0) {
      fail(at + " data offset " + std::to_string(t.offset) + " (at byte " + std::to_string(off_pos) +
           ") is not a multiple of the alignment " + std::to_string(alignment_));
    }
    t.data = nullptr;
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment (which is at most 2^30: no overflow).
  data_offset_ = (uint64_t(c.pos) + alignment_ - 1) / alignment_ * alignment_;
  for (Tensor& t : tensors_) {
    // offset + data_offset_ wraps only for offsets far past any file size, which fail here anyway.
    const bool wraps = t.offset > std::numeric_limits<uint64_t>::max() - data_offset_;
    const uint64_t start = data_offset_ + t.offset;
    if (wraps || start > uint64_t(size_) || t.bytes > size_ - size_t(start)) {
      const std::string where = wraps ? std::to_string(data_offset_) + " + " + std::to_string(t.offset)
                                      : std::to_string(start);
      fail("tensor '" + t.name + "' data [offset " + where + ", " + std::to_string(t.bytes) +
           " bytes) runs past the end of the file (" + std::to_string(size_) + " bytes)");
    }
    t.data = base_ + start;
  }
}

// ---- metadata ----------------------------------------------------------------------------------

const File::Value* File::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

void File::wrong_type(const std::string& key, const Value& v, const char* wanted) const {
  fail("metadata '" + key + "' is a " + type_desc(v) + ", not " + wanted);
}

bool File::has(const std::string& key) const { return find(key) != nullptr; }

std::vector<std::string> File::keys() const {
  std::vector<std::string> out;
  out.reserve(kv_.size());
  for (const auto& [k, v] : kv_) out.push_back(k);
  return out;
}

std::optional<ValueType> File::type_of(const std::string& key) const {
  const Value* v = find(key);
  return v ? std::optional<ValueType>(v->type) : std::nullopt;
}

std::optional<std::pair<ValueType, uint64_t>> File::array_info(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr || v->type != ValueType::ARRAY) return std::nullopt;
  return std::make_pair(v->elem_type, v->count);
}

std::optional<int64_t> File::get_int(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!is_integer(v->type) && v->type != ValueType::BOOL) wrong_type(key, *v, "an integer");
  bool overflow = false;
  const int64_t x = load_int(v->type, v->data, overflow);
  if (overflow) fail("metadata '" + key + "' = " + std::to_string(load<uint64_t>(v->data)) + " does not fit in int64");
  return x;
}

std::optional<double> File::get_float(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type == ValueType::FLOAT32) return double(load<float>(v->data));
  if (v->type == ValueType::FLOAT64) return load<double>(v->data);
  if (v->type == ValueType::UINT64) return double(load<uint64_t>(v->data));
  if (!is_integer(v->type)) wrong_type(key, *v, "a number");
  bool overflow = false;
  return double(load_int(v->type, v->data, overflow));
}

std::optional<std::string> File::get_string(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != ValueType::STRING) wrong_type(key, *v, "a string");
  return std::string(reinterpret_cast<const char*>(v->data), size_t(v->count));
}

std::optional<bool> File::get_bool(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != ValueType::BOOL) wrong_type(key, *v, "a bool");
  return v->data[0] != 0;
}

std::vector<std::string> File::get_string_array(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return {};
  if (v->type != ValueType::ARRAY || v->elem_type != ValueType::STRING) wrong_type(key, *v, "an array of strings");
  std::vector<std::string> out;
  out.reserve(size_t(v->count));
  const uint8_t* p = v->data;  // every length was checked by parse()
  for (uint64_t i = 0; i < v->count; ++i) {
    const auto n = size_t(load<uint64_t>(p));
    out.emplace_back(reinterpret_cast<const char*>(p + 8), n);
    p += 8 + n;
  }
  return out;
}

std::vector<float> File::get_float_array(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return {};
  const ValueType e = v->elem_type;
  if (v->type != ValueType::ARRAY || !(e == ValueType::FLOAT32 || e == ValueType::FLOAT64 || is_integer(e))) {
    wrong_type(key, *v, "an array of numbers");
  }
  std::vector<float> out(static_cast<size_t>(v->count));
  const size_t es = scalar_size(uint32_t(e));
  for (uint64_t i = 0; i < v->count; ++i) {
    const uint8_t* p = v->data + i * es;
    bool overflow = false;
    out[size_t(i)] = e == ValueType::FLOAT32   ? load<float>(p)
                     : e == ValueType::FLOAT64 ? float(load<double>(p))
                     : e == ValueType::UINT64  ? float(load<uint64_t>(p))
                                               : float(load_int(e, p, overflow));
  }
  return out;
}

std::vector<int64_t> File::get_int_array(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return {};
  if (v->type != ValueType::ARRAY || !(is_integer(v->elem_type) || v->elem_type == ValueType::BOOL)) {
    wrong_type(key, *v, "an array of integers");
  }
  std::vector<int64_t> out(static_cast<size_t>(v->count));
  const size_t es = scalar_size(uint32_t(v->elem_type));
  for (uint64_t i = 0; i < v->count; ++i) {
    bool overflow = false;
    out[size_t(i)] = load_int(v->elem_type, v->data + i * es, overflow);
    if (overflow) fail("metadata '" + key + "' element #" + std::to_string(i) + " does not fit in int64");
  }
  return out;
}

// ---- tensors -----------------------------------------------------------------------------------

const File::Tensor* File::tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tokenhost::gguf
