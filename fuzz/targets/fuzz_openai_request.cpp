// The OpenAI request parser on arbitrary bodies, both endpoints: a request that parses is used as the
// server would (its chat messages rendered with each template family).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/chat_template.hpp"
#include "api/openai_request.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace api = tokenhost::api;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (api::Endpoint e : {api::Endpoint::completions, api::Endpoint::chat_completions}) {
    auto r = api::parse_request(e, body);
    if (!r) continue;
    (void)api::sampling_params(r.value(), 1);
    if (e == api::Endpoint::chat_completions)
      for (const char* tmpl : {"", "{{ bos_token }}[INST]", "<|im_start|>", "<|start_header_id|>"})
        (void)api::render_chat(r.value().messages, tmpl);
  }
  return 0;
}
