// Rendering chat messages into one prompt string with the model's chat template.
//
// GGUF files carry the template as a Jinja program (`tokenizer.chat_template`). We do not run Jinja:
// templates in the wild are a handful of formats written many times over, so the template text is only
// used to recognize the format, and the format is rendered by hand-written code below. Recognized
// families (looked for in this order):
//   llama3  "<|start_header_id|>"           <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
//   chatml  "<|im_start|>" (Qwen2, ...)      <|im_start|>{role}\n{content}<|im_end|>\n
//   gemma   "<start_of_turn>"                <bos><start_of_turn>{user|model}\n{content}<end_of_turn>\n
//   llama2  "[INST]" and "<<SYS>>"           <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>
//   mistral "[INST]" without "<<SYS>>"       <s>[INST] {user} [/INST]{assistant}</s>
//   zephyr  "<|user|>"                       <|{role}|>\n{content}</s>\n
// Anything else, or no template at all (base models such as stories260K), renders as `plain`:
//   "{role}: {content}\n" per message and "assistant:" as the generation prompt. Plain text rather than
//   ChatML because a model without a template has no ChatML special tokens; "<|im_start|>" would be
//   tokenized as ordinary text and mean nothing to it.
//
// Tools (ChatRenderOptions::tools) are written in Llama 3.1's format (the functions as JSON in the first
// user message, calls as a JSON object, results as `ipython` messages) or Hermes' as Qwen2.5 uses it
// (the functions in <tools> in the system message, calls in <tool_call> tags, results in
// <tool_response> tags of a user message). Known gaps: Llama 3.1's date preamble and built-in tools,
// and Phi-3's "<|end|>", are not reproduced.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/api_error.hpp"
#include "api/tools.hpp"

namespace tokenhost::api {

// One chat message after request validation: content parts are already joined into one string.
// Roles are "system", "user", "assistant" or "tool" ("developer" is mapped to "system" by the parser).
struct ChatMessage {
  std::string role;
  std::string content;
  std::string name;          // optional participant name; not rendered by any family
  std::string tool_call_id;  // role "tool" only; not rendered by any family
  std::vector<ToolCall> tool_calls{};  // role "assistant": the calls it made (rendered in the template's tool format)
};

enum class ChatTemplateFamily { llama3, chatml, gemma, llama2, mistral, zephyr, plain };

// "llama3", "chatml", ... for logs and for the `family` a caller may force.
std::string_view family_name(ChatTemplateFamily family);

// The family a Jinja template belongs to; plain when empty or unrecognized.
ChatTemplateFamily detect_chat_template(std::string_view jinja);
// How a template writes tool calls: Llama 3.1's for a llama3 template that speaks of tools or ipython,
// Hermes' for a ChatML one with <tool_call>; none otherwise.
ToolFormat detect_tool_format(std::string_view jinja);

struct ChatRenderOptions {
  // Append the assistant's header so the model continues as the assistant. Off when the caller wants
  // the model to continue a partial assistant message given as the last message.
  bool add_generation_prompt = true;
  // The model's BOS / EOS token text from its vocabulary; "" = the family's usual spelling
  // ("<|begin_of_text|>", "<s>", "<bos>", "</s>"). Only families that write them use them.
  std::string bos_token;
  std::string eos_token;
  // A system message to render when the conversation has none. Qwen2's ChatML template writes
  // "You are a helpful assistant." in that case; the template-text overload of render_chat finds such a
  // literal in a ChatML template and uses it when this is "".
  std::string default_system_message;
  // Tools the model is told of (a request's active tools), in tool_format; NULL or empty: none. The
  // messages' tool calls and "tool" results are written in tool_format whenever it is not none.
  const std::vector<Tool>* tools = nullptr;
  ToolFormat tool_format = ToolFormat::none;
};

struct RenderedChat {
  std::string text;
  ChatTemplateFamily family = ChatTemplateFamily::plain;
  // false when the template was present but not recognized and `plain` was used: worth a warning.
  bool template_recognized = true;
  // The text starts with the BOS token's text. The tokenizer must then not add its own BOS, or the
  // model sees two (llama.cpp's "double BOS" problem); when false, add BOS as the model normally does.
  bool includes_bos = false;
};

// Renders messages with the family detected from `chat_template`. Fails (400, param "messages[i]...")
// for what the family cannot express: a system message anywhere but first in llama2/mistral/gemma, a
// "tool" message in families without a tool role, or no messages at all.
ApiResult<RenderedChat> render_chat(const std::vector<ChatMessage>& messages, std::string_view chat_template,
                                    const ChatRenderOptions& options = {});

// The same with the family given, for callers that override detection (a deployment setting).
ApiResult<RenderedChat> render_chat(const std::vector<ChatMessage>& messages, ChatTemplateFamily family,
                                    const ChatRenderOptions& options = {});

}  // namespace tokenhost::api
