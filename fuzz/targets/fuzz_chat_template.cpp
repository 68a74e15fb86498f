// The chat renderer with an arbitrary template text (a GGUF's tokenizer.chat_template) and messages
// made from the input: it recognizes a family or falls back, and never crashes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "api/chat_template.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace api = tokenhost::api;
  const std::string in(reinterpret_cast<const char*>(data), size);
  // The template up to the first NUL, then messages "role\x01content" separated by NULs.
  const size_t cut = in.find('\0');
  const std::string tmpl = in.substr(0, cut);
  std::vector<api::ChatMessage> messages;
  for (size_t at = cut == std::string::npos ? in.size() : cut + 1; at < in.size();) {
    const size_t end = std::min(in.find('\0', at), in.size());
    const std::string part = in.substr(at, end - at);
    const size_t sep = part.find('\x01');
    api::ChatMessage m;
    m.role = part.substr(0, sep);
    m.content = sep == std::string::npos ? std::string() : part.substr(sep + 1);
    messages.push_back(m);
    at = end + 1;
  }
  api::ChatRenderOptions options;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  (void)api::render_chat(messages, tmpl, options);
  options.add_generation_prompt = false;
  (void)api::render_chat(messages, tmpl, options);
  return 0;
}
