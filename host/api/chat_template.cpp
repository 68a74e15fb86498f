#include "api/chat_template.hpp"

#include <optional>

namespace tokenhost::api {

namespace {

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

std::string trim(std::string_view s) {
  const char* ws = " \t\r\n";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

std::string or_default(const std::string& given, const char* fallback) { return given.empty() ? fallback : given; }

ApiError unsupported_role(size_t i, ChatTemplateFamily f, const std::string& role, const char* why) {
  return invalid_request("messages[" + std::to_string(i) + "].role",
                         "the model's chat template (" + std::string(family_name(f)) + ") " + why + "; got role '" +
                             role + "' at messages[" + std::to_string(i) + "]");
}

// A literal default system prompt in a ChatML template: the text between "<|im_start|>system" plus a
// newline (real, or the two characters \n inside a Jinja string) and "<|im_end|>", when it contains no
// Jinja expression.
std::string chatml_default_system(std::string_view t) {
  for (std::string_view head : {std::string_view("<|im_start|>system\n"), std::string_view("<|im_start|>system\\n")}) {
    size_t at = t.find(head);
    while (at != std::string_view::npos) {
      size_t b = at + head.size();
      size_t e = t.find("<|im_end|>", b);
      if (e == std::string_view::npos) break;
      std::string_view body = t.substr(b, e - b);
      bool literal = !body.empty() && body.find_first_of("{}'\"+") == std::string_view::npos;
      if (literal) return std::string(body);
      at = t.find(head, e);
    }
  }
  return {};
}

// Families that know only system/user/assistant, with system allowed only first, and whose first user
// turn absorbs the system text. Returns the system text (or nullopt) and checks the roles.
struct Split {
  std::optional<std::string> system;
  size_t first = 0;  // index of the first non-system message
};

ApiResult<Split> split_system(const std::vector<ChatMessage>& m, ChatTemplateFamily f) {
  Split s;
  if (!m.empty() && m[0].role == "system") {
    s.system = m[0].content;
    s.first = 1;
  }
  for (size_t i = s.first; i < m.size(); ++i) {
    if (m[i].role == "system") return unsupported_role(i, f, m[i].role, "accepts a system message only first");
    if (m[i].role != "user" && m[i].role != "assistant")
      return unsupported_role(i, f, m[i].role, "has only system, user and assistant roles");
  }
  return s;
}

bool has_tools(const ChatRenderOptions& o) { return o.tools != nullptr && !o.tools->empty(); }

// A function as the templates list it: {"type": "function", "function": {"name", "description", "parameters"}}.
std::string tool_json(const Tool& t, int indent) {
  nlohmann::ordered_json f = {{"name", t.name}};
  if (!t.description.empty()) f["description"] = t.description;
  f["parameters"] = t.parameters;
  return nlohmann::ordered_json{{"type", "function"}, {"function", f}}.dump(indent);
}

std::string call_json(const ToolCall& c, const char* arguments_key) {
  return "{\"name\": " + nlohmann::json(c.name).dump() + ", \"" + arguments_key + "\": " + (c.arguments.empty() ? "{}" : c.arguments) + "}";
}

RenderedChat llama3(const std::vector<ChatMessage>& m, const ChatRenderOptions& o) {
  RenderedChat r{or_default(o.bos_token, "<|begin_of_text|>"), ChatTemplateFamily::llama3, true, true};
  const bool tools = o.tool_format == ToolFormat::llama31;
  bool first_user = true;
  for (const auto& msg : m) {
    std::string role = msg.role, content = trim(msg.content);
    if (tools && role == "tool") role = "ipython";  // Llama 3.1's role for a call's result
    if (tools && role == "assistant" && !msg.tool_calls.empty()) {
      content.clear();
      for (const ToolCall& c : msg.tool_calls) content += call_json(c, "parameters");
    }
    if (tools && has_tools(o) && role == "user" && first_user) {
      // The functions go in the first user message (the template's default).
      std::string block = "Given the following functions, please respond with a JSON for a function call with its proper "
                          "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
                          "\"parameters\": dictionary of argument name and its value}. Do not use variables.\n\n";
      for (const Tool& t : *o.tools) block += tool_json(t, 4) + "\n\n";
      content = block + content;
    }
    if (role == "user") first_user = false;
    r.text += "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + content + "<|eot_id|>";
  }
  if (o.add_generation_prompt) r.text += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return r;
}

RenderedChat chatml(const std::vector<ChatMessage>& m, const ChatRenderOptions& o) {
  RenderedChat r{{}, ChatTemplateFamily::chatml, true, false};
  const bool tools = o.tool_format == ToolFormat::hermes;
  bool has_system = !m.empty() && m[0].role == "system";
  std::string tools_block;
  if (tools && has_tools(o)) {
    tools_block = "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
                  "function signatures within <tools></tools> XML tags:\n<tools>";
    for (const Tool& t : *o.tools) tools_block += "\n" + tool_json(t, -1);
    tools_block += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
                   "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
  }
  if (!has_system && (!o.default_system_message.empty() || !tools_block.empty()))
    r.text += "<|im_start|>system\n" + o.default_system_message + tools_block + "<|im_end|>\n";
  for (size_t i = 0; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    if (tools && msg.role == "tool") {
      // Results go back as <tool_response> blocks, a run of them in one user message.
      const bool first = i == 0 || m[i - 1].role != "tool", last = i + 1 == m.size() || m[i + 1].role != "tool";
      if (first) r.text += "<|im_start|>user";
      r.text += "\n<tool_response>\n" + msg.content + "\n</tool_response>";
      if (last) r.text += "<|im_end|>\n";
      continue;
    }
    std::string content = msg.content;
    if (i == 0 && has_system) content += tools_block;
    if (tools && msg.role == "assistant")
      for (const ToolCall& c : msg.tool_calls) content += (content.empty() ? "" : "\n") + std::string("<tool_call>\n") + call_json(c, "arguments") + "\n</tool_call>";
    r.text += "<|im_start|>" + msg.role + "\n" + content + "<|im_end|>\n";
  }
  if (o.add_generation_prompt) r.text += "<|im_start|>assistant\n";
  return r;
}

// Gemma has no system role: the system text opens the first user turn, as Gemma 2/3 templates do.
ApiResult<RenderedChat> gemma(const std::vector<ChatMessage>& m, const ChatRenderOptions& o) {
  auto s = split_system(m, ChatTemplateFamily::gemma);
  if (!s) return s.error();
  RenderedChat r{or_default(o.bos_token, "<bos>"), ChatTemplateFamily::gemma, true, true};
  bool first_user = true;
  for (size_t i = s->first; i < m.size(); ++i) {
    std::string content = trim(m[i].content);
    if (m[i].role == "user" && first_user && s->system) content = trim(*s->system) + "\n\n" + content;
    if (m[i].role == "user") first_user = false;
    r.text += "<start_of_turn>" + std::string(m[i].role == "assistant" ? "model" : "user") + "\n" + content +
              "<end_of_turn>\n";
  }
  if (o.add_generation_prompt) r.text += "<start_of_turn>model\n";
  return r;
}

// Meta's llama-2-chat format: every user turn opens with BOS, the system text sits in a <<SYS>> block
// inside the first one, and the prompt already ends in "[/INST]", so add_generation_prompt adds nothing.
ApiResult<RenderedChat> llama2(const std::vector<ChatMessage>& m, const ChatRenderOptions& o) {
  auto s = split_system(m, ChatTemplateFamily::llama2);
  if (!s) return s.error();
  std::string bos = or_default(o.bos_token, "<s>"), eos = or_default(o.eos_token, "</s>");
  RenderedChat r{{}, ChatTemplateFamily::llama2, true, false};
  bool first = true;
  for (size_t i = s->first; i < m.size(); ++i) {
    if (m[i].role == "user") {
      std::string content = trim(m[i].content);
      if (first && s->system) content = "<<SYS>>\n" + *s->system + "\n<</SYS>>\n\n" + content;
      r.text += bos + "[INST] " + content + " [/INST]";
    } else {
      r.text += " " + trim(m[i].content) + " " + eos;
    }
    first = false;
  }
  r.includes_bos = r.text.compare(0, bos.size(), bos) == 0;
  return r;
}

// Mistral-Instruct v0.1/v0.2: one BOS, no system block (its text opens the first user turn), and the
// assistant's reply follows "[/INST]" without a space.
ApiResult<RenderedChat> mistral(const std::vector<ChatMessage>& m, const ChatRenderOptions& o) {
  auto s = split_system(m, ChatTemplateFamily::mistral);
  if (!s) return s.error();
  RenderedChat r{or_default(o.bos_token, "<s>"), ChatTemplateFamily::mistral, true, true};
  std::string eos = or_default(o.eos_token, "</s>");
  bool first_user = true;
  for (size_t i = s->first; i < m.size(); ++i) {
    if (m[i].role == "user") {
      std::string content = m[i].content;
      if (first_user && s->system) content = *s->system + "\n\n" + content;
      first_user = false;
      r.text += "[INST] " + content + " [/INST]";
    } else {
      r.text += m[i].content + eos;
    }
  }
  return r;
}

RenderedChat zephyr(const std::vector<ChatMessage>& m, const ChatRenderOptions& o) {
  std::string eos = or_default(o.eos_token, "</s>");
  RenderedChat r{{}, ChatTemplateFamily::zephyr, true, false};
  for (const auto& msg : m) r.text += "<|" + msg.role + "|>\n" + msg.content + eos + "\n";
  if (o.add_generation_prompt) r.text += "<|assistant|>\n";
  return r;
}

RenderedChat plain(const std::vector<ChatMessage>& m, const ChatRenderOptions& o) {
  RenderedChat r{{}, ChatTemplateFamily::plain, true, false};
  for (const auto& msg : m) r.text += msg.role + ": " + msg.content + "\n";
  if (o.add_generation_prompt) r.text += "assistant:";
  return r;
}

}  // namespace

std::string_view family_name(ChatTemplateFamily family) {
  switch (family) {
    case ChatTemplateFamily::llama3: return "llama3";
    case ChatTemplateFamily::chatml: return "chatml";
    case ChatTemplateFamily::gemma: return "gemma";
    case ChatTemplateFamily::llama2: return "llama2";
    case ChatTemplateFamily::mistral: return "mistral";
    case ChatTemplateFamily::zephyr: return "zephyr";
    case ChatTemplateFamily::plain: return "plain";
  }
  return "plain";
}

ChatTemplateFamily detect_chat_template(std::string_view t) {
  if (contains(t, "<|start_header_id|>")) return ChatTemplateFamily::llama3;
  if (contains(t, "<|im_start|>")) return ChatTemplateFamily::chatml;
  if (contains(t, "<start_of_turn>")) return ChatTemplateFamily::gemma;
  if (contains(t, "[INST]")) return contains(t, "<<SYS>>") ? ChatTemplateFamily::llama2 : ChatTemplateFamily::mistral;
  if (contains(t, "<|user|>")) return ChatTemplateFamily::zephyr;
  return ChatTemplateFamily::plain;
}

ToolFormat detect_tool_format(std::string_view t) {
  const ChatTemplateFamily f = detect_chat_template(t);
  if (f == ChatTemplateFamily::llama3 && (contains(t, "ipython") || contains(t, "tools"))) return ToolFormat::llama31;
  if (f == ChatTemplateFamily::chatml && contains(t, "<tool_call>")) return ToolFormat::hermes;
  return ToolFormat::none;
}

ApiResult<RenderedChat> render_chat(const std::vector<ChatMessage>& messages, ChatTemplateFamily family,
                                    const ChatRenderOptions& options) {
  if (messages.empty()) return invalid_request("messages", "'messages' must hold at least one message");
  switch (family) {
    case ChatTemplateFamily::llama3: return llama3(messages, options);
    case ChatTemplateFamily::chatml: return chatml(messages, options);
    case ChatTemplateFamily::gemma: return gemma(messages, options);
    case ChatTemplateFamily::llama2: return llama2(messages, options);
    case ChatTemplateFamily::mistral: return mistral(messages, options);
    case ChatTemplateFamily::zephyr: return zephyr(messages, options);
    case ChatTemplateFamily::plain: break;
  }
  return plain(messages, options);
}

ApiResult<RenderedChat> render_chat(const std::vector<ChatMessage>& messages, std::string_view chat_template,
                                    const ChatRenderOptions& options) {
  ChatTemplateFamily family = detect_chat_template(chat_template);
  ChatRenderOptions o = options;
  if (family == ChatTemplateFamily::chatml && o.default_system_message.empty())
    o.default_system_message = chatml_default_system(chat_template);
  auto r = render_chat(messages, family, o);
  if (r && family == ChatTemplateFamily::plain) r->template_recognized = chat_template.empty();
  return r;
}

}  // namespace tokenhost::api
