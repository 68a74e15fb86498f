// Chat templates: each family recognized from a real template's text and rendered to the exact prompt
// the model was trained on, for multi-turn conversations with and without a system message.
#include <catch2/catch.hpp>

#include "api/chat_template.hpp"

namespace api_chat_template_tests {

using namespace tokenhost::api;

namespace {

// Excerpts of the templates shipped with the models (enough to recognize them).
const char* kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
const char* kQwen2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
    "}}{% endif %}";
const char* kChatML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
const char* kLlama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = "
    "'<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
    "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + "
    "' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif "
    "%}{% endfor %}";
const char* kMistral =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] "
    "+ ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor "
    "%}";
const char* kGemma =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% "
    "else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim "
    "+ '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";
const char* kZephyr =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% "
    "elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif "
    "%}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

const std::vector<ChatMessage> kWithSystem = {
    {"system", "You are terse.", {}, {}},
    {"user", "Hi", {}, {}},
    {"assistant", "Hello!", {}, {}},
    {"user", "How are you?", {}, {}},
};
const std::vector<ChatMessage> kNoSystem(kWithSystem.begin() + 1, kWithSystem.end());

RenderedChat render(const std::vector<ChatMessage>& m, const char* tmpl, bool generation_prompt = true) {
  ChatRenderOptions o;
  o.add_generation_prompt = generation_prompt;
  auto r = render_chat(m, tmpl, o);
  REQUIRE(r.ok());
  return r.value();
}

}  // namespace

TEST_CASE("chat template: families are recognized from the template text", "[api][chat_template]") {
  REQUIRE(detect_chat_template(kLlama3) == ChatTemplateFamily::llama3);
  REQUIRE(detect_chat_template(kQwen2) == ChatTemplateFamily::chatml);
  REQUIRE(detect_chat_template(kChatML) == ChatTemplateFamily::chatml);
  REQUIRE(detect_chat_template(kLlama2) == ChatTemplateFamily::llama2);
  REQUIRE(detect_chat_template(kMistral) == ChatTemplateFamily::mistral);
  REQUIRE(detect_chat_template(kGemma) == ChatTemplateFamily::gemma);
  REQUIRE(detect_chat_template(kZephyr) == ChatTemplateFamily::zephyr);
  REQUIRE(detect_chat_template("") == ChatTemplateFamily::plain);
  REQUIRE(detect_chat_template("{{ messages }}") == ChatTemplateFamily::plain);
  REQUIRE(family_name(ChatTemplateFamily::llama3) == "llama3");
  REQUIRE(family_name(ChatTemplateFamily::plain) == "plain");
}

TEST_CASE("chat template: llama 3", "[api][chat_template]") {
  auto r = render(kWithSystem, kLlama3);
  REQUIRE(r.family == ChatTemplateFamily::llama3);
  REQUIRE(r.includes_bos);
  REQUIRE(r.text ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n");
  REQUIRE(render(kNoSystem, kLlama3, false).text ==
          "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
          "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>");
}

TEST_CASE("chat template: chatml, and Qwen2's default system message", "[api][chat_template]") {
  const std::string turns =
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
      "<|im_start|>user\nHow are you?<|im_end|>\n";
  auto r = render(kWithSystem, kChatML);
  REQUIRE(r.family == ChatTemplateFamily::chatml);
  REQUIRE_FALSE(r.includes_bos);
  REQUIRE(r.text == "<|im_start|>system\nYou are terse.<|im_end|>\n" + turns + "<|im_start|>assistant\n");
  REQUIRE(render(kNoSystem, kChatML).text == turns + "<|im_start|>assistant\n");
  REQUIRE(render(kNoSystem, kChatML, false).text == turns);
  // Qwen2 writes its default system message when the conversation has none, and not otherwise.
  REQUIRE(render(kNoSystem, kQwen2).text ==
          "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" + turns + "<|im_start|>assistant\n");
  REQUIRE(render(kWithSystem, kQwen2).text == render(kWithSystem, kChatML).text);
}

TEST_CASE("chat template: llama 2", "[api][chat_template]") {
  auto r = render(kWithSystem, kLlama2);
  REQUIRE(r.family == ChatTemplateFamily::llama2);
  REQUIRE(r.includes_bos);
  REQUIRE(r.text ==
          "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello! </s>"
          "<s>[INST] How are you? [/INST]");
  // The prompt already ends where the assistant speaks: the generation prompt adds nothing.
  REQUIRE(render(kNoSystem, kLlama2, false).text == "<s>[INST] Hi [/INST] Hello! </s><s>[INST] How are you? [/INST]");
  REQUIRE(render(kNoSystem, kLlama2, true).text == render(kNoSystem, kLlama2, false).text);
}

TEST_CASE("chat template: mistral", "[api][chat_template]") {
  auto r = render(kNoSystem, kMistral);
  REQUIRE(r.family == ChatTemplateFamily::mistral);
  REQUIRE(r.includes_bos);
  REQUIRE(r.text == "<s>[INST] Hi [/INST]Hello!</s>[INST] How are you? [/INST]");
  REQUIRE(render(kWithSystem, kMistral).text ==
          "<s>[INST] You are terse.\n\nHi [/INST]Hello!</s>[INST] How are you? [/INST]");
}

TEST_CASE("chat template: gemma", "[api][chat_template]") {
  const std::string turns =
      "<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nHow are you?<end_of_turn>\n"
      "<start_of_turn>model\n";
  auto r = render(kNoSystem, kGemma);
  REQUIRE(r.family == ChatTemplateFamily::gemma);
  REQUIRE(r.includes_bos);
  REQUIRE(r.text == "<bos><start_of_turn>user\nHi<end_of_turn>\n" + turns);
  REQUIRE(render(kWithSystem, kGemma).text == "<bos><start_of_turn>user\nYou are terse.\n\nHi<end_of_turn>\n" + turns);
}

TEST_CASE("chat template: zephyr", "[api][chat_template]") {
  auto r = render(kWithSystem, kZephyr);
  REQUIRE(r.family == ChatTemplateFamily::zephyr);
  REQUIRE(r.text ==
          "<|system|>\nYou are terse.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n"
          "<|user|>\nHow are you?</s>\n<|assistant|>\n");
  REQUIRE(render(kNoSystem, kZephyr, false).text ==
          "<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n<|user|>\nHow are you?</s>\n");
}

TEST_CASE("chat template: plain fallback for a missing or unknown template", "[api][chat_template]") {
  const std::string expected = "system: You are terse.\nuser: Hi\nassistant: Hello!\nuser: How are you?\nassistant:";
  auto none = render(kWithSystem, "");
  REQUIRE(none.family == ChatTemplateFamily::plain);
  REQUIRE(none.template_recognized);
  REQUIRE_FALSE(none.includes_bos);
  REQUIRE(none.text == expected);
  auto unknown = render(kWithSystem, "{% for m in messages %}<<{{ m.content }}>>{% endfor %}");
  REQUIRE(unknown.family == ChatTemplateFamily::plain);
  REQUIRE_FALSE(unknown.template_recognized);
  REQUIRE(unknown.text == expected);
  REQUIRE(render(kNoSystem, "", false).text == "user: Hi\nassistant: Hello!\nuser: How are you?\n");
}

TEST_CASE("chat template: the model's own BOS/EOS text and a forced family", "[api][chat_template]") {
  ChatRenderOptions o;
  o.bos_token = "<BOS>";
  o.eos_token = "<EOS>";
  auto r = render_chat(kNoSystem, ChatTemplateFamily::llama2, o);
  REQUIRE(r.ok());
  REQUIRE(r->text == "<BOS>[INST] Hi [/INST] Hello! <EOS><BOS>[INST] How are you? [/INST]");
  REQUIRE(r->includes_bos);
}

TEST_CASE("chat template: what a family cannot express is refused, naming the message", "[api][chat_template]") {
  auto late_system = kNoSystem;
  late_system.push_back({"system", "Be brief.", {}, {}});
  for (const char* t : {kLlama2, kMistral, kGemma}) {
    auto r = render_chat(late_system, t);
    REQUIRE_FALSE(r.ok());
    REQUIRE(r.error().http_status == 400);
    REQUIRE(r.error().param == "messages[3].role");
  }
  auto tool = kNoSystem;
  tool.push_back({"tool", "42", {}, "call_1"});
  auto r = render_chat(tool, kLlama2);
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.error().param == "messages[3].role");
  // Families with free-form roles render it.
  REQUIRE(render_chat(tool, kChatML).ok());
  REQUIRE(render_chat(tool, kLlama3).ok());

  auto empty = render_chat({}, kChatML);
  REQUIRE_FALSE(empty.ok());
  REQUIRE(empty.error().param == "messages");
}

}  // namespace api_chat_template_tests
