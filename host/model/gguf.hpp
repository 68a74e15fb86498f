// GGUF model files (versions 2 and 3, little-endian): a reader that maps the file and checks every
// length before it reads, and a writer for test and converted models.
//
// Layout: "GGUF", uint32 version, uint64 tensor count, uint64 metadata count; the metadata (string key,
// uint32 value type, value); the tensor infos (string name, uint32 n_dims, uint64 ne[n_dims], uint32
// ggml type, uint64 offset); padding to general.alignment (default 32); the tensor data, each tensor at
// its offset from the start of that data section, aligned. Strings are a uint64 length and bytes, no
// terminator; an array is a uint32 element type, a uint64 count and the elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <tokenhost/th_common.h>

namespace tokenhost::gguf {

// A malformed, unreadable or unwritable file. what() starts with the file's path.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// GGUF's metadata value types.
enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* value_type_name(ValueType type);  // "uint8", ..., "unknown"

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kDefaultAlignment = 32;
constexpr size_t kMaxDims = 4;

// A GGUF file mapped read-only. Tensor data is used in place: Tensor::data points into the mapping,
// which lives as long as the File. Thread-safe for concurrent const use. Prints nothing.
class File {
 public:
  struct Tensor {
    std::string name;
    th_dtype type;
    std::vector<int64_t> ne;  // ne[0] innermost (a row), 1..4 dimensions, each >= 1
    uint64_t offset;          // as in the file: from the start of the data section (File::data_offset())
    size_t bytes;             // ne[0..] elements of `type`
    const uint8_t* data;      // into the mapping
  };

  // Maps and checks the file. Throws Error ("<path>: <what is wrong> ...") for a file that cannot be
  // opened or mapped, or is not a well-formed GGUF of supported tensor types.
  static std::unique_ptr<File> open(const std::string& path);
  // The same checks on a copy of `bytes` (held in an exactly sized heap block, so that a sanitizer sees
  // any read past its end); `name` stands for the path in messages.
  static std::unique_ptr<File> from_bytes(const std::string& name, const void* bytes, size_t size);

  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t file_size() const { return size_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section in the file

  // Metadata. A missing key gives nullopt (or an empty vector); a key of another type throws Error
  // naming the key and both types. get_int reads any integer type and bool (a uint64 above INT64_MAX
  // throws); get_float reads float32, float64 and any integer type; get_bool reads bool only.
  bool has(const std::string& key) const;
  std::vector<std::string> keys() const;  // in file order
  std::optional<ValueType> type_of(const std::string& key) const;
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  // Arrays: strings; any float or integer elements as float; any integer (or bool) elements as int64.
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<float> get_float_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  // Element type and count of an array (nullopt if the key is missing or not an array).
  std::optional<std::pair<ValueType, uint64_t>> array_info(const std::string& key) const;

  // Tensors, in file order; nullptr for a missing name.
  const Tensor* tensor(const std::string& name) const;
  const std::vector<Tensor>& tensors() const { return tensors_; }

  // A metadata value: its type and where its bytes are (inside the file image).
  struct Value {
    ValueType type;
    ValueType elem_type;  // arrays only
    uint64_t count;       // arrays only: number of elements
    const uint8_t* data;  // scalar: the value; string: its bytes (count = length); array: first element
    const uint8_t* encoded;  // the value as the file encodes it, after its type field (Writer::copy_value)
    size_t encoded_bytes;
  };
  // A metadata value as stored (nullptr for a missing key).
  const Value* value(const std::string& key) const { return find(key); }

 private:
  File() = default;
  void parse();
  [[noreturn]] void fail(const std::string& what) const;
  const Value* find(const std::string& key) const;
  [[noreturn]] void wrong_type(const std::string& key, const Value& v, const char* wanted) const;

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;  // base_ is an mmap (else a malloc'd block)
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Builds a GGUF v3 file in memory and writes it at once. Keys keep the order of their first set();
// setting a key again replaces its value. general.alignment, when set (to an integer power of two),
// is the alignment used; otherwise 32 (not written). Not thread-safe.
class Writer {
 public:
  void set(const std::string& key, int64_t v);
  void set(const std::string& key, int32_t v);
  void set(const std::string& key, uint64_t v);
  void set(const std::string& key, uint32_t v);
  void set(const std::string& key, float v);
  void set(const std::string& key, double v);
  void set(const std::string& key, bool v);
  void set(const std::string& key, const std::string& v);
  void set(const std::string& key, const char* v);
  void set_array(const std::string& key, const std::vector<std::string>& v);
  void set_array(const std::string& key, const std::vector<float>& v);
  void set_array(const std::string& key, const std::vector<int32_t>& v);
  // The value `key` has in `from`, of whatever type (an array of uint8 token types, say), byte for byte.
  // Throws std::invalid_argument when `from` has no such key.
  void copy_value(const std::string& key, const File& from);

  // Copies `bytes` bytes of tensor data, which must be exactly row_bytes(type, ne[0]) * ne[1] * ...
  // Throws std::invalid_argument for a duplicate or empty name, an unsupported type, 0 or more than 4
  // dimensions, a dimension < 1, ne[0] not a multiple of the block size, or a size mismatch.
  void add_tensor(const std::string& name, th_dtype type, std::vector<int64_t> ne, const void* data, size_t bytes);

  // The whole file image.
  std::vector<uint8_t> bytes() const;
  // Writes bytes() to a temporary file in path's folder, then renames it onto path: a failure leaves
  // no partial file. Throws Error ("<path>: ...").
  void write(const std::string& path) const;

 private:
  struct Entry {
    ValueType type;
    ValueType elem_type = ValueType::UINT8;
    std::vector<uint8_t> payload{};   // the encoded value (after the type field)
    std::optional<int64_t> integer{};  // integer values that fit in int64 (for general.alignment)
  };
  struct PendingTensor {
    std::string name;
    th_dtype type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  void put(const std::string& key, Entry e);
  uint32_t alignment() const;
  // Emits the file image in order through sink(const void*, size_t).
  template <class Sink>
  void serialize(Sink&& sink) const;

  std::vector<std::pair<std::string, Entry>> kv_;
  std::map<std::string, size_t> kv_index_;
  std::vector<PendingTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace tokenhost::gguf
