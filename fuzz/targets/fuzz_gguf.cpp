// The GGUF reader on arbitrary bytes: a well-formed file reads, anything else is a gguf::Error; every
// accessor of a file that read stays inside it.
#include <cstddef>
#include <cstdint>

#include "model/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto file = tokenhost::gguf::File::from_bytes("fuzz.gguf", data, size);
    for (const auto& key : file->keys()) {
      (void)file->get_string(key);
      (void)file->get_int(key);
      (void)file->get_float(key);
      (void)file->get_string_array(key);
      (void)file->get_int_array(key);
      (void)file->get_float_array(key);
    }
  } catch (const tokenhost::gguf::Error&) {
  } catch (const std::runtime_error&) {  // a typed accessor asked for another type: named, not a crash
  }
  return 0;
}
