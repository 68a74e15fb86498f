// GGUF reader and writer: round trip, the real stories260K file, and corrupt files (each refused with
// a message naming the problem, never read out of bounds: run under ASan as test_gguf_asan).
#include <catch2/catch.hpp>

#include "models.hpp"
#include "files.hpp"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "model/gguf.hpp"
#include "model/quant.hpp"

namespace model_gguf_tests {

namespace fs = std::filesystem;
namespace gguf = tokenhost::gguf;
namespace quant = tokenhost::quant;
using tokenhost::testing::TempDir;
using tokenhost::testing::read_file;
using tokenhost::testing::write_file;

namespace {

// The message of the gguf::Error that f throws ("" if it throws nothing, a marker for another type).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const gguf::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a gguf::Error> ") + e.what();
  }
  return "";
}

// `bytes` must be refused both from memory (an exactly sized heap copy: ASan sees any overrun) and
// from a file, with a message that starts with the name and contains each of `expect`.
void check_refused(const TempDir& dir, const std::vector<uint8_t>& bytes, const std::vector<std::string>& expect,
                   size_t size = SIZE_MAX) {
  size = std::min(size, bytes.size());
  const std::string mem = error_of([&] { gguf::File::from_bytes("bad.gguf", bytes.data(), size); });
  INFO("size " << size << ", from memory: " << mem);
  CHECK(mem.rfind("bad.gguf: ", 0) == 0);
  const std::string path = dir.file("bad.gguf");
  write_file(path, bytes.data(), size);
  const std::string file = error_of([&] { gguf::File::open(path); });
  INFO("from the file: " << file);
  CHECK(file.rfind(path + ": ", 0) == 0);
  for (const std::string& e : expect) {
    CHECK(mem.find(e) != std::string::npos);
    CHECK(file.find(e) != std::string::npos);
  }
}

// Hand-made GGUF bytes, for files the Writer would never produce.
struct Raw {
  std::vector<uint8_t> b;
  Raw& u32(uint32_t v) { return put(&v, 4); }
  Raw& u64(uint64_t v) { return put(&v, 8); }
  Raw& put(const void* p, size_t n) {
    b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    return *this;
  }
  Raw& str(const std::string& s) { return u64(s.size()).put(s.data(), s.size()); }
  Raw& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return put("GGUF", 4).u32(version).u64(n_tensors).u64(n_kv);
  }
  Raw& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  Raw& kv_str(const std::string& key, const std::string& v) { return str(key).u32(8).str(v); }
  Raw& tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    str(name).u32(uint32_t(ne.size()));
    for (uint64_t n : ne) u64(n);
    return u32(type).u64(offset);
  }
  Raw& pad(size_t alignment = 32) {
    b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

// A well-formed file with one f32 tensor "t" of shape [8, 2]: the corrupt variants change one thing.
Raw valid_raw(const std::function<void(Raw&)>& tensor_info = nullptr) {
  Raw r;
  r.header(3, 1, 2).kv_str("general.architecture", "llama").kv_u32("general.quantization_version", 2);
  if (tensor_info) {
    tensor_info(r);
  } else {
    r.tensor("t", {8, 2}, TH_DTYPE_F32, 0);
  }
  return r.pad().zeros(64);
}

std::vector<uint8_t> random_tensor(std::mt19937& rng, th_dtype type, int64_t elems) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(elems));
  for (float& v : x) v = dist(rng);
  std::vector<uint8_t> out(quant::row_bytes(type, elems));
  quant::quantize_row(type, x.data(), out.data(), elems);
  return out;
}


}  // namespace

TEST_CASE("gguf: a written model reads back the same", "[gguf]") {
  TempDir dir;
  std::mt19937 rng(42);
  gguf::Writer w;
  w.set("general.architecture", "llama");
  w.set("general.name", std::string("round trip \xE2\x9C\x93"));
  w.set("llama.block_count", uint32_t(5));
  w.set("llama.context_length", int32_t(-7));
  w.set("test.int64", int64_t(-1234567890123));
  w.set("test.uint64", uint64_t(1) << 63);
  w.set("test.float", 0.25f);
  w.set("test.double", 1e-300);
  w.set("test.bool", true);
  w.set("test.replaced", int32_t(1));
  w.set_array("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "", "hello", std::string("a\0b", 3)});
  w.set_array("tokenizer.ggml.scores", std::vector<float>{0.0f, -1.5f, 3.25f, -0.0f});
  w.set_array("tokenizer.ggml.token_type", std::vector<int32_t>{2, 1, 1, -3});
  w.set_array("test.empty", std::vector<float>{});
  w.set("test.replaced", "now a string");  // keeps its place among the keys

  struct Spec {
    std::string name;
    th_dtype type;
    std::vector<int64_t> ne;
  };
  const std::vector<Spec> specs = {{"f32", TH_DTYPE_F32, {64, 3}},    {"f16", TH_DTYPE_F16, {32, 2}},
                                   {"bf16", TH_DTYPE_BF16, {16}},     {"q8_0", TH_DTYPE_Q8_0, {64, 2}},
                                   {"q4_0", TH_DTYPE_Q4_0, {32, 3, 2}}, {"q4_K", TH_DTYPE_Q4_K, {256, 2}},
                                   {"q6_K", TH_DTYPE_Q6_K, {512, 1, 1, 2}}};
  std::vector<std::vector<uint8_t>> data;
  for (const Spec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.ne) n *= d;
    data.push_back(random_tensor(rng, s.type, n));
    w.add_tensor(s.name, s.type, s.ne, data.back().data(), data.back().size());
  }
  const std::string path = dir.file("model.gguf");
  w.write(path);
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);  // no temporary left
  const std::vector<uint8_t> on_disk = read_file(path);
  CHECK(on_disk == w.bytes());

  std::unique_ptr<gguf::File> f = gguf::File::open(path);
  CHECK(f->path() == path);
  CHECK(f->version() == 3);
  CHECK(f->file_size() == on_disk.size());
  CHECK(f->alignment() == 32);
  CHECK(f->data_offset() % 32 == 0);
  CHECK(f->keys() == std::vector<std::string>{"general.architecture", "general.name", "llama.block_count",
                                                "llama.context_length", "test.int64", "test.uint64", "test.float",
                                                "test.double", "test.bool", "test.replaced", "tokenizer.ggml.tokens",
                                                "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "test.empty"});
  CHECK(f->get_string("general.architecture") == "llama");
  CHECK(f->get_string("general.name") == "round trip \xE2\x9C\x93");
  CHECK(f->get_int("llama.block_count") == 5);
  CHECK(f->type_of("llama.block_count") == gguf::ValueType::UINT32);
  CHECK(f->get_int("llama.context_length") == -7);
  CHECK(f->type_of("llama.context_length") == gguf::ValueType::INT32);
  CHECK(f->get_int("test.int64") == -1234567890123);
  CHECK(f->get_float("test.uint64") == 9223372036854775808.0);
  CHECK(f->get_float("test.float") == 0.25);
  CHECK(f->type_of("test.float") == gguf::ValueType::FLOAT32);
  CHECK(f->get_float("test.double") == 1e-300);
  CHECK(f->get_float("llama.block_count") == 5.0);
  CHECK(f->get_bool("test.bool") == true);
  CHECK(f->get_int("test.bool") == 1);
  CHECK(f->get_string("test.replaced") == "now a string");
  CHECK(f->get_string_array("tokenizer.ggml.tokens") ==
        std::vector<std::string>{"<unk>", "", "hello", std::string("a\0b", 3)});
  CHECK(f->get_float_array("tokenizer.ggml.scores") == std::vector<float>{0.0f, -1.5f, 3.25f, -0.0f});
  CHECK(f->get_int_array("tokenizer.ggml.token_type") == std::vector<int64_t>{2, 1, 1, -3});
  CHECK(f->get_float_array("tokenizer.ggml.token_type") == std::vector<float>{2, 1, 1, -3});
  CHECK(f->array_info("tokenizer.ggml.tokens") == std::make_pair(gguf::ValueType::STRING, uint64_t(4)));
  CHECK(f->get_float_array("test.empty").empty());
  CHECK(f->has("test.empty"));
  // missing keys and wrong types
  CHECK_FALSE(f->has("nope"));
  CHECK_FALSE(f->get_int("nope").has_value());
  CHECK_FALSE(f->get_string("nope").has_value());
  CHECK(f->get_string_array("nope").empty());
  CHECK_FALSE(f->array_info("general.name").has_value());
  CHECK_THROWS_AS(f->get_int("general.name"), gguf::Error);
  CHECK_THROWS_WITH(f->get_int("test.float"), Catch::Contains("'test.float' is a float32, not an integer"));
  CHECK_THROWS_WITH(f->get_int("test.uint64"), Catch::Contains("does not fit in int64"));
  CHECK_THROWS_WITH(f->get_string("llama.block_count"), Catch::StartsWith(path + ": "));
  CHECK_THROWS_AS(f->get_bool("llama.block_count"), gguf::Error);
  CHECK_THROWS_WITH(f->get_string_array("tokenizer.ggml.scores"), Catch::Contains("array of float32"));
  CHECK_THROWS_AS(f->get_int_array("tokenizer.ggml.scores"), gguf::Error);
  CHECK_THROWS_AS(f->get_float_array("tokenizer.ggml.tokens"), gguf::Error);

  REQUIRE(f->tensors().size() == specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const gguf::File::Tensor& t = f->tensors()[i];
    INFO("tensor " << specs[i].name);
    CHECK(t.name == specs[i].name);
    CHECK(t.type == specs[i].type);
    CHECK(t.ne == specs[i].ne);
    CHECK(t.bytes == data[i].size());
    CHECK(t.offset % 32 == 0);
    CHECK(size_t(t.data - f->tensors()[0].data) == t.offset);
    CHECK(f->data_offset() + t.offset + t.bytes <= f->file_size());
    CHECK(std::memcmp(t.data, data[i].data(), t.bytes) == 0);
    CHECK(f->tensor(specs[i].name) == &t);
  }
  CHECK(f->tensor("missing") == nullptr);
  CHECK(reinterpret_cast<uintptr_t>(f->tensor("f32")->data) % 32 == 0);  // the mapping is page aligned

  // The same image from memory.
  const std::vector<uint8_t> image = w.bytes();
  std::unique_ptr<gguf::File> m = gguf::File::from_bytes("mem", image.data(), image.size());
  CHECK(m->keys() == f->keys());
  CHECK(std::memcmp(m->tensor("q6_K")->data, data.back().data(), data.back().size()) == 0);
}

TEST_CASE("gguf: writer options and refusals", "[gguf]") {
  TempDir dir;
  std::vector<float> row(256, 1.0f);
  gguf::Writer w;
  w.set("general.alignment", uint32_t(64));
  w.add_tensor("a", TH_DTYPE_F32, {3}, row.data(), 12);
  w.add_tensor("b", TH_DTYPE_F32, {5}, row.data(), 20);
  w.write(dir.file("aligned.gguf"));
  auto f = gguf::File::open(dir.file("aligned.gguf"));
  CHECK(f->alignment() == 64);
  CHECK(f->data_offset() % 64 == 0);
  CHECK(f->tensor("b")->offset == 64);

  CHECK_THROWS_AS(w.add_tensor("a", TH_DTYPE_F32, {3}, row.data(), 12), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor("", TH_DTYPE_F32, {3}, row.data(), 12), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor("c", TH_DTYPE_F32, {3}, row.data(), 16), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor("c", 3, {32}, row.data(), 20), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor("c", TH_DTYPE_Q4_K, {100}, row.data(), 144), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor("c", TH_DTYPE_F32, {1, 1, 1, 1, 1}, row.data(), 4), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor("c", TH_DTYPE_F32, {}, row.data(), 4), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor("c", TH_DTYPE_F32, {4, 0}, row.data(), 0), std::invalid_argument);
  CHECK_THROWS_AS(w.set("general.alignment", uint32_t(48)), std::invalid_argument);
  CHECK_THROWS_AS(w.set("general.alignment", 32.0f), std::invalid_argument);

  const std::string bad = dir.file("no/such/folder/x.gguf");
  CHECK_THROWS_WITH(w.write(bad), Catch::StartsWith(bad + ": "));
  CHECK_FALSE(fs::exists(dir.path / "no"));
}

TEST_CASE("gguf: the stories260K model", "[gguf][stories260k]") {
  const std::string path = tokenhost::testing::require_model_file("stories260K.gguf");
  auto f = gguf::File::open(path);
  CHECK(f->version() == 3);
  CHECK(f->tensors().size() == 48);
  CHECK(f->get_string("general.architecture") == "llama");
  CHECK(f->get_int("llama.embedding_length") == 64);
  CHECK(f->get_int("llama.block_count") == 5);
  CHECK(f->get_string_array("tokenizer.ggml.tokens").size() == 512);
  CHECK(f->get_float_array("tokenizer.ggml.scores").size() == 512);
  CHECK(f->get_int_array("tokenizer.ggml.token_type").size() == 512);
  CHECK(f->get_string_array("tokenizer.ggml.tokens")[1] == "<s>");
  const gguf::File::Tensor* embd = f->tensor("token_embd.weight");
  REQUIRE(embd != nullptr);
  CHECK(embd->ne == std::vector<int64_t>{64, 512});
  CHECK(embd->bytes == 64 * 512 * 4);
  size_t total = 0;
  for (const auto& t : f->tensors()) {
    INFO(t.name);
    CHECK(t.type == TH_DTYPE_F32);
    total += t.bytes;
  }
  CHECK(total <= f->file_size() - f->data_offset());
}

TEST_CASE("gguf: a file cut short anywhere is refused", "[gguf][corrupt]") {
  TempDir dir;
  std::mt19937 rng(7);
  gguf::Writer w;
  w.set("general.architecture", "llama");
  w.set("llama.block_count", uint32_t(1));
  w.set("test.double", 2.5);
  w.set_array("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "<s>", "</s>", "hello", "world"});
  w.set_array("tokenizer.ggml.scores", std::vector<float>{0, 0, 0, -1, -2});
  w.set_array("tokenizer.ggml.token_type", std::vector<int32_t>{2, 3, 3, 1, 1});
  const std::vector<uint8_t> q8 = random_tensor(rng, TH_DTYPE_Q8_0, 64);
  const std::vector<uint8_t> f32 = random_tensor(rng, TH_DTYPE_F32, 10);
  w.add_tensor("blk.0.attn_q.weight", TH_DTYPE_Q8_0, {32, 2}, q8.data(), q8.size());
  w.add_tensor("output_norm.weight", TH_DTYPE_F32, {10}, f32.data(), f32.size());
  const std::vector<uint8_t> full = w.bytes();
  auto whole = gguf::File::from_bytes("ok", full.data(), full.size());
  const gguf::File::Tensor& last = whole->tensors().back();
  const size_t data_end = size_t(whole->data_offset() + last.offset + last.bytes);
  REQUIRE(whole->data_offset() > 200);  // every cut below 200 lands in the header

  std::vector<size_t> cuts;
  for (size_t n = 0; n < 200; ++n) cuts.push_back(n);
  for (size_t n : {whole->data_offset() - 1, whole->data_offset(), whole->data_offset() + 1,
                   size_t(whole->data_offset() + last.offset), data_end - 4, data_end - 1}) {
    cuts.push_back(n);
  }
  for (size_t n : cuts) {
    INFO("cut at " << n << " of " << full.size() << " bytes");
    check_refused(dir, full, {}, n);
  }
  // The ones that end inside a length-prefixed field say so.
  check_refused(dir, full, {"empty file"}, 0);
  check_refused(dir, full, {"the magic \"GGUF\" at byte 0 needs 4 bytes, but the file ends at byte 3"}, 3);
  check_refused(dir, full, {"the tensor count", "needs 8 bytes"}, 12);
  check_refused(dir, full, {"'output_norm.weight' data [offset", "runs past the end of the file"}, data_end - 1);
  // Cut in the padding after the last tensor: all data is there, the file is fine.
  CHECK_NOTHROW(gguf::File::from_bytes("ok", full.data(), data_end));
}

TEST_CASE("gguf: corrupt headers and metadata are refused, naming the problem", "[gguf][corrupt]") {
  TempDir dir;
  REQUIRE_NOTHROW(gguf::File::from_bytes("base", valid_raw().b.data(), valid_raw().b.size()));

  std::vector<uint8_t> b = valid_raw().b;
  std::memcpy(b.data(), "GGUX", 4);
  check_refused(dir, b, {"not a GGUF file", "47 47 55 58"});

  b = valid_raw().b;
  b[4] = 99;
  check_refused(dir, b, {"unsupported GGUF version 99"});
  b[4] = 1;
  check_refused(dir, b, {"unsupported GGUF version 1"});
  b[4] = 0, b[7] = 3;
  check_refused(dir, b, {"big-endian"});

  Raw r;  // version 2 has the same layout
  r.header(2, 0, 1).kv_u32("a", 1);
  CHECK(gguf::File::from_bytes("v2", r.b.data(), r.b.size())->version() == 2);

  r = Raw();
  r.header(3, 0, uint64_t(1) << 40).kv_u32("a", 1);
  check_refused(dir, r.b, {"metadata count 1099511627776 is impossible"});
  r = Raw();
  r.header(3, uint64_t(1) << 61, 1).kv_u32("a", 1);
  check_refused(dir, r.b, {"tensor count 2305843009213693952 is impossible"});

  r = Raw();  // a key of length 2^60
  r.header(3, 0, 1).u64(uint64_t(1) << 60).put("abc", 3).u32(4).u32(0);
  check_refused(dir, r.b, {"metadata entry #0 key", "string length 1152921504606846976", "runs past the end"});
  r = Raw();  // a string value of length 2^60
  r.header(3, 0, 1).str("general.name").u32(8).u64(uint64_t(1) << 60).put("xyz", 3).zeros(16);
  check_refused(dir, r.b, {"'general.name' value", "string length 1152921504606846976"});
  r = Raw();  // a string array whose 2nd element claims 2^60 bytes
  r.header(3, 0, 1).str("tokens").u32(9).u32(8).u64(2).str("a").u64(uint64_t(1) << 60).zeros(8);
  check_refused(dir, r.b, {"'tokens' element #1", "string length 1152921504606846976"});
  r = Raw();  // 2^62 uint64 elements
  r.header(3, 0, 1).str("big").u32(9).u32(10).u64(uint64_t(1) << 62).zeros(32);
  check_refused(dir, r.b, {"'big': array of 4611686018427387904 uint64", "runs past the end"});

  r = Raw();
  r.header(3, 0, 2).kv_u32("fine", 1).str("weird").u32(13).u32(0);
  check_refused(dir, r.b, {"metadata entry #1 'weird': unknown value type 13"});
  r = Raw();
  r.header(3, 0, 1).str("arr").u32(9).u32(77).u64(1).zeros(8);
  check_refused(dir, r.b, {"'arr': unknown array element type 77"});
  r = Raw();
  r.header(3, 0, 1).str("arr").u32(9).u32(9).u64(1).zeros(16);
  check_refused(dir, r.b, {"arrays of arrays"});
  r = Raw();
  r.header(3, 0, 2).kv_u32("twice", 1).kv_u32("twice", 2);
  check_refused(dir, r.b, {"'twice': duplicate key"});
  r = Raw();
  r.header(3, 0, 1).kv_u32("general.alignment", 48);
  check_refused(dir, r.b, {"general.alignment 48 is not a power of two"});
  r = Raw();
  r.header(3, 0, 1).kv_str("general.alignment", "32");
  check_refused(dir, r.b, {"general.alignment is a string, not an integer"});
}

TEST_CASE("gguf: corrupt tensor infos are refused, naming the tensor", "[gguf][corrupt]") {
  TempDir dir;
  auto with = [](const std::function<void(Raw&)>& info) { return valid_raw(info).b; };
  check_refused(dir, with([](Raw& r) { r.tensor("t", {8, 2}, TH_DTYPE_F32, 4096); }),
                {"tensor 't' data [offset 4256, 64 bytes) runs past the end of the file (224 bytes)"});
  check_refused(dir, with([](Raw& r) { r.tensor("t", {8, 2}, TH_DTYPE_F32, ~uint64_t(0) - 31); }),
                {"tensor 't' data [offset", "runs past the end of the file"});
  check_refused(dir, with([](Raw& r) { r.tensor("t", {8, 2}, TH_DTYPE_F32, 32); }),
                {"tensor 't' data [offset", "runs past the end"});
  check_refused(dir, with([](Raw& r) { r.tensor("t", {8, 2}, TH_DTYPE_F32, 16); }),
                {"tensor 't' data offset 16", "not a multiple of the alignment 32"});
  check_refused(dir, with([](Raw& r) { r.tensor("t", {1, 1, 1, 1, 1, 1, 1}, TH_DTYPE_F32, 0); }),
                {"tensor 't' has 7 dimensions (1 to 4 supported)"});
  check_refused(dir, with([](Raw& r) { r.tensor("t", {}, TH_DTYPE_F32, 0); }), {"tensor 't' has 0 dimensions"});
  check_refused(dir, with([](Raw& r) { r.tensor("t", {uint64_t(1) << 40, uint64_t(1) << 40}, TH_DTYPE_F32, 0); }),
                {"tensor 't' shape [1099511627776, 1099511627776] has more than 2^63-1 elements"});
  check_refused(dir, with([](Raw& r) { r.tensor("t", {uint64_t(1) << 31, uint64_t(1) << 31}, TH_DTYPE_F32, 0); }),
                {"tensor 't' shape [2147483648, 2147483648] of f32 needs more bytes than the whole file"});
  check_refused(dir, with([](Raw& r) { r.tensor("t", {uint64_t(1) << 62}, TH_DTYPE_F32, 0); }),
                {"tensor 't' shape [4611686018427387904] of f32 needs more bytes than the whole file"});
  check_refused(dir, with([](Raw& r) { r.tensor("t", {8, 0}, TH_DTYPE_F32, 0); }), {"tensor 't' dimension 1 is 0"});
  check_refused(dir, with([](Raw& r) { r.tensor("t", {32, 2}, 3, 0); }),
                {"tensor 't' has element type q4_1 (3), which is not supported"});
  check_refused(dir, with([](Raw& r) { r.tensor("t", {32}, 4000000000u, 0); }),
                {"element type unknown(4000000000) (4000000000)"});
  check_refused(dir, with([](Raw& r) { r.tensor("t", {100}, TH_DTYPE_Q4_K, 0); }),
                {"tensor 't' rows of 100 elements are not a whole number of q4_K blocks (256 elements each)"});
  check_refused(dir, with([](Raw& r) { r.u64(uint64_t(1) << 60).put("t", 1); }),
                {"tensor #0 name", "string length 1152921504606846976"});

  Raw r;  // two tensors of one name
  r.header(3, 2, 0).tensor("t", {4}, TH_DTYPE_F32, 0).tensor("t", {4}, TH_DTYPE_F32, 32).pad().zeros(64);
  check_refused(dir, r.b, {"tensor 't': duplicate tensor name"});

  // Not files at all.
  const std::string missing = dir.file("missing.gguf");
  CHECK_THROWS_WITH(gguf::File::open(missing), Catch::StartsWith(missing + ": cannot open"));
  CHECK_THROWS_WITH(gguf::File::open(dir.path.string()), Catch::Contains("not a regular file"));
}

TEST_CASE("gguf: randomly damaged files are read or refused, never overrun", "[gguf][corrupt]") {
  const char* env = std::getenv("TOKENHOST_TEST_SEED");
  const uint32_t seed = env != nullptr ? uint32_t(std::strtoul(env, nullptr, 10)) : std::random_device{}();
  INFO("seed " << seed << " (TOKENHOST_TEST_SEED repeats it)");
  std::mt19937 rng(seed);
  gguf::Writer w;
  w.set("general.architecture", "llama");
  w.set("general.alignment", uint32_t(32));
  w.set("a.float", 1.5f);
  w.set_array("tokens", std::vector<std::string>{"x", "yy", "zzz"});
  w.set_array("types", std::vector<int32_t>{1, 2, 3});
  const std::vector<uint8_t> q4 = random_tensor(rng, TH_DTYPE_Q4_0, 64);
  w.add_tensor("w", TH_DTYPE_Q4_0, {32, 2}, q4.data(), q4.size());
  w.add_tensor("n", TH_DTYPE_F32, {4}, q4.data(), 16);
  const std::vector<uint8_t> base = w.bytes();
  const size_t header = gguf::File::from_bytes("base", base.data(), base.size())->data_offset();
  int read = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> b = base;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % header;
      b[at] = rng() % 3 == 0 ? uint8_t(rng()) : uint8_t(b[at] ^ (1u << (rng() % 8)));
    }
    const size_t size = rng() % 4 == 0 ? rng() % b.size() : b.size();
    try {
      auto f = gguf::File::from_bytes("damaged", b.data(), size);
      for (const std::string& key : f->keys()) {  // every getter, whatever the type
        for (const auto& get : std::vector<std::function<void()>>{
                 [&] { f->get_int(key); }, [&] { f->get_float(key); }, [&] { f->get_string(key); },
                 [&] { f->get_bool(key); }, [&] { f->get_string_array(key); }, [&] { f->get_float_array(key); },
                 [&] { f->get_int_array(key); }}) {
          try {
            get();
          } catch (const gguf::Error&) {
          }
        }
      }
      unsigned sum = 0;
      for (const auto& t : f->tensors()) {
        for (size_t j = 0; j < t.bytes; ++j) sum += t.data[j];
      }
      (void)sum;
      ++read;
    } catch (const gguf::Error& e) {
      REQUIRE(std::string(e.what()).rfind("damaged: ", 0) == 0);
      ++refused;
    }
  }
  INFO(read << " read, " << refused << " refused");
  CHECK(refused > 0);
}

}  // namespace model_gguf_tests
