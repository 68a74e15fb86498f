#include "api/openai_response.hpp"

#include <algorithm>

#include <chrono>

namespace tokenhost::api {

using nlohmann::json;

namespace {

json finish_json(FinishReason f) {
  switch (f) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::tool_calls: return "tool_calls";
    case FinishReason::none: break;
  }
  return nullptr;
}

json tool_calls_json(const std::vector<ToolCall>& calls, bool indexed) {
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    json c = {{"id", calls[k].id}, {"type", "function"}, {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
    if (indexed) c["index"] = k;
    out.push_back(std::move(c));
  }
  return out;
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

const char* object_name(Endpoint e, bool chunk) {
  if (e == Endpoint::completions) return "text_completion";  // OpenAI names completions chunks the same
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json envelope(const ResponseMeta& meta, Endpoint e, bool chunk) {
  json j = {{"id", meta.id}, {"object", object_name(e, chunk)}, {"created", meta.created}, {"model", meta.model},
            {"choices", json::array()}};
  if (chunk && meta.include_usage) j["usage"] = nullptr;
  return j;
}

json chat_chunk(const ResponseMeta& meta, size_t index, json delta, const json& logprobs, FinishReason f) {
  json j = envelope(meta, Endpoint::chat_completions, true);
  j["choices"].push_back(
      {{"index", index}, {"delta", std::move(delta)}, {"logprobs", logprobs}, {"finish_reason", finish_json(f)}});
  return j;
}

}  // namespace

json Usage::to_json() const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

std::string make_response_id(Endpoint endpoint, std::mt19937_64& rng) {
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::uniform_int_distribution<size_t> pick(0, sizeof(alphabet) - 2);
  std::string id = endpoint == Endpoint::completions ? "cmpl-" : "chatcmpl-";
  for (int i = 0; i < 24; ++i) id += alphabet[pick(rng)];
  return id;
}

ResponseMeta make_response_meta(Endpoint endpoint, std::string model, std::mt19937_64& rng) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return {make_response_id(endpoint, rng), std::chrono::duration_cast<std::chrono::seconds>(now).count(),
          std::move(model)};
}

json completion_logprobs(const std::vector<TokenLogprobs>& tokens, size_t text_offset, size_t leading_skip) {
  json j = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
            {"text_offset", json::array()}};
  for (const auto& t : tokens) {
    j["tokens"].push_back(t.token);
    if (t.unscored) {
      j["token_logprobs"].push_back(nullptr);
      j["top_logprobs"].push_back(nullptr);
    } else {
      j["token_logprobs"].push_back(t.logprob);
      json top = json::object();
      for (const auto& alt : t.top) top[alt.token] = alt.logprob;
      j["top_logprobs"].push_back(std::move(top));
    }
    j["text_offset"].push_back(text_offset);
    // The skip belongs to the first token with text (an echoed prompt's BOS has none).
    text_offset += t.token.size() - std::min(t.token.size(), leading_skip);
    if (!t.token.empty()) leading_skip = 0;
  }
  return j;
}

json chat_logprobs(const std::vector<TokenLogprobs>& tokens) {
  json content = json::array();
  for (const auto& t : tokens) {
    json top = json::array();
    for (const auto& alt : t.top)
      top.push_back({{"token", alt.token}, {"logprob", alt.logprob}, {"bytes", bytes_of(alt.token)}});
    content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_of(t.token)}, {"top_logprobs", top}});
  }
  return {{"content", std::move(content)}};
}

json completion_response(const ResponseMeta& meta, const std::vector<CompletionChoice>& choices, const Usage& usage) {
  json j = envelope(meta, Endpoint::completions, false);
  for (size_t i = 0; i < choices.size(); ++i) {
    const auto& c = choices[i];
    j["choices"].push_back({{"index", i},
                            {"text", c.text},
                            {"logprobs", c.has_logprobs ? completion_logprobs(c.logprobs, 0, c.leading_skip) : json(nullptr)},
                            {"finish_reason", finish_json(c.finish_reason)}});
  }
  j["usage"] = usage.to_json();
  return j;
}

json chat_completion_response(const ResponseMeta& meta, const std::vector<CompletionChoice>& choices,
                              const Usage& usage) {
  json j = envelope(meta, Endpoint::chat_completions, false);
  for (size_t i = 0; i < choices.size(); ++i) {
    const auto& c = choices[i];
    json message = {{"role", "assistant"}, {"content", c.text}};
    if (!c.tool_calls.empty()) {
      if (c.text.empty()) message["content"] = nullptr;
      message["tool_calls"] = tool_calls_json(c.tool_calls, false);
    }
    j["choices"].push_back({{"index", i},
                            {"message", std::move(message)},
                            {"logprobs", c.has_logprobs ? chat_logprobs(c.logprobs) : json(nullptr)},
                            {"finish_reason", finish_json(c.finish_reason)}});
  }
  j["usage"] = usage.to_json();
  return j;
}

json completion_chunk(const ResponseMeta& meta, size_t index, const std::string& text, FinishReason finish_reason,
                      const std::vector<TokenLogprobs>* logprobs, size_t text_offset) {
  json j = envelope(meta, Endpoint::completions, true);
  j["choices"].push_back({{"index", index},
                          {"text", text},
                          {"logprobs", logprobs ? completion_logprobs(*logprobs, text_offset) : json(nullptr)},
                          {"finish_reason", finish_json(finish_reason)}});
  return j;
}

json chat_role_chunk(const ResponseMeta& meta, size_t index) {
  return chat_chunk(meta, index, {{"role", "assistant"}, {"content", ""}}, nullptr, FinishReason::none);
}

json chat_content_chunk(const ResponseMeta& meta, size_t index, const std::string& text,
                        const std::vector<TokenLogprobs>* logprobs) {
  return chat_chunk(meta, index, {{"content", text}}, logprobs ? chat_logprobs(*logprobs) : json(nullptr),
                    FinishReason::none);
}

json chat_tool_calls_chunk(const ResponseMeta& meta, size_t index, const std::vector<ToolCall>& calls) {
  return chat_chunk(meta, index, {{"tool_calls", tool_calls_json(calls, true)}}, nullptr, FinishReason::none);
}

json chat_finish_chunk(const ResponseMeta& meta, size_t index, FinishReason finish_reason) {
  return chat_chunk(meta, index, json::object(), nullptr, finish_reason);
}

json usage_chunk(const ResponseMeta& meta, Endpoint endpoint, const Usage& usage) {
  json j = envelope(meta, endpoint, true);
  j["usage"] = usage.to_json();
  return j;
}

std::string sse_event(const json& payload) { return "data: " + dump_json(payload) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

json models_list(const std::vector<ModelCard>& models) {
  json data = json::array();
  for (const auto& m : models) {
    json card = {{"id", m.id}, {"object", "model"}, {"created", m.created}, {"owned_by", m.owned_by}};
    if (m.context_length > 0) card["context_length"] = card["max_model_len"] = m.context_length;
    data.push_back(std::move(card));
  }
  return {{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace tokenhost::api
