#include "loadgen/openai.hpp"

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace tokenhost::loadgen {

using nlohmann::json;

std::string request_body(const BodyOptions& o, const std::string& prompt, uint32_t max_tokens,
                         const std::vector<std::string>& history) {
  json body;
  if (!o.model.empty()) body["model"] = o.model;
  if (o.chat) {
    json messages = json::array();
    for (size_t i = 0; i < history.size(); ++i) messages.push_back({{"role", i % 2 == 0 ? "user" : "assistant"}, {"content", history[i]}});
    messages.push_back({{"role", "user"}, {"content", prompt}});
    body["messages"] = std::move(messages);
  } else {
    std::string text;
    for (size_t i = 0; i < history.size(); ++i) text += history[i] + (i % 2 == 1 ? "\n" : "");
    body["prompt"] = text + prompt;
  }
  body["max_tokens"] = max_tokens;
  if (o.stream) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
  } else {
    body["stream"] = false;
  }
  if (o.ignore_eos) body["ignore_eos"] = true;
  if (!o.extra.empty()) body.update(json::parse(o.extra));
  return body.dump();
}

void parse_extra_body(const std::string& text) {
  if (text.empty()) return;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument("--extra-body is not JSON: " + std::string(e.what()));
  }
  if (!j.is_object()) throw std::invalid_argument("--extra-body must be a JSON object, like {\"temperature\": 0}");
}

namespace {

std::string string_or_empty(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<uint64_t> count(const json& usage, const char* key) {
  auto it = usage.find(key);
  if (it == usage.end() || !it->is_number_integer() || it->get<int64_t>() < 0) return std::nullopt;
  return it->get<uint64_t>();
}

std::string error_text(const json& e) {
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object()) {
    std::string m = string_or_empty(e, "message");
    if (!m.empty()) return m;
  }
  return e.dump();
}

}  // namespace

Chunk parse_chunk(const std::string& data) {
  Chunk c;
  if (data == "[DONE]") {
    c.done = true;
    return c;
  }
  json j = json::parse(data, nullptr, false);
  if (j.is_discarded()) throw std::runtime_error("not JSON: " + data.substr(0, 200));
  if (!j.is_object()) throw std::runtime_error("not a JSON object: " + data.substr(0, 200));
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    c.error = error_text(*e);
    return c;
  }
  if (auto choices = j.find("choices"); choices != j.end()) {
    if (!choices->is_array()) throw std::runtime_error("'choices' is not an array: " + data.substr(0, 200));
    for (const auto& ch : *choices) {
      if (!ch.is_object()) continue;
      c.text += string_or_empty(ch, "text");
      for (const char* key : {"delta", "message"})
        if (auto d = ch.find(key); d != ch.end() && d->is_object()) {
          c.text += string_or_empty(*d, "content");
          c.text += string_or_empty(*d, "reasoning_content");
        }
      if (auto f = ch.find("finish_reason"); f != ch.end() && !f->is_null()) c.finished = true;
    }
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    c.completion_tokens = count(*u, "completion_tokens");
    c.prompt_tokens = count(*u, "prompt_tokens");
  }
  return c;
}

std::string error_message(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object()) {
    if (auto e = j.find("error"); e != j.end() && !e->is_null()) return error_text(*e);
    std::string m = string_or_empty(j, "message");
    if (!m.empty()) return m;
  }
  std::string s = body;
  s.erase(0, s.find_first_not_of(" \t\r\n"));
  s.erase(s.find_last_not_of(" \t\r\n") + 1);
  if (s.size() > 300) s = s.substr(0, 300) + "...";
  return s;
}

}  // namespace tokenhost::loadgen
