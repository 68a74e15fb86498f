// JSON bodies the OpenAI-compatible endpoints send back: whole responses, streaming chunks and their
// SSE framing, log-probabilities in both of OpenAI's formats, and the model list.
//
// The builders take plain values the engine produces (text, counts, per-token logprobs) and know
// nothing about requests or sequences, so the gateway decides when to send what. Token text may hold
// partial UTF-8 characters; serialize with dump_json() (api_error.hpp) or sse_event(), never
// json::dump() directly, which throws on them.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/openai_request.hpp"

namespace tokenhost::api {

// none: not finished yet (streamed chunks), serialized as null; tool_calls: the answer calls tools.
enum class FinishReason { none, stop, length, tool_calls };

// One alternative at a generated position.
struct TopLogprob {
  std::string token;  // decoded token text, possibly a partial UTF-8 character
  double logprob = 0;
};

// The log-probability information of one generated token, filled by the caller from the sampler's
// output and the tokenizer's piece text.
struct TokenLogprobs {
  std::string token;
  double logprob = 0;
  std::vector<TopLogprob> top;  // best first; empty when top_logprobs is 0
  // The text's first token, which nothing predicts (an echoed prompt's): null log-probabilities.
  bool unscored = false;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  nlohmann::json to_json() const;  // with total_tokens
};

// What every response and chunk of one request repeats. Chunks of one stream must share it.
struct ResponseMeta {
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;    // the model that served it (not necessarily the name the client asked for)
  // stream_options.include_usage: OpenAI then puts "usage": null in every chunk before usage_chunk(),
  // so clients can count on the field being there.
  bool include_usage = false;
};

// A fresh id, "cmpl-" or "chatcmpl-" plus 24 random letters and digits.
std::string make_response_id(Endpoint endpoint, std::mt19937_64& rng);
// Meta with a fresh id and the current time.
ResponseMeta make_response_meta(Endpoint endpoint, std::string model, std::mt19937_64& rng);

// Log-probabilities in the legacy completions format: {tokens, token_logprobs, top_logprobs (one
// {token: logprob} object per position), text_offset}. Offsets are byte offsets into the choice's
// text, starting at `text_offset` (what earlier chunks of a stream already covered). leading_skip: bytes
// of the first token's text that the choice's text does not hold (the space a SentencePiece vocabulary
// puts before an echoed prompt's first word).
nlohmann::json completion_logprobs(const std::vector<TokenLogprobs>& tokens, size_t text_offset = 0, size_t leading_skip = 0);
// Log-probabilities in the chat format: {content: [{token, logprob, bytes, top_logprobs: [{token,
// logprob, bytes}]}]}; `bytes` carries the raw UTF-8 so clients can rebuild split characters.
nlohmann::json chat_logprobs(const std::vector<TokenLogprobs>& tokens);

// One finished choice. Its `index` in the response is its position in the vector, so a batch of prompts
// with n > 1 passes choices ordered prompt by prompt (index = prompt * n + k).
struct CompletionChoice {
  std::string text;
  FinishReason finish_reason = FinishReason::stop;
  bool has_logprobs = false;  // the request asked for them; logprobs then holds one entry per token
  std::vector<TokenLogprobs> logprobs;
  size_t leading_skip = 0;    // completion_logprobs' leading_skip
  std::vector<ToolCall> tool_calls;  // chat: the calls the answer makes (text: the content beside them)
};

// {"id", "object": "text_completion", "created", "model", "choices": [{index, text, logprobs,
// finish_reason}], "usage"}.
nlohmann::json completion_response(const ResponseMeta& meta, const std::vector<CompletionChoice>& choices,
                                   const Usage& usage);
// {"id", "object": "chat.completion", ..., "choices": [{index, message: {role: "assistant", content},
// logprobs, finish_reason}], "usage"}.
nlohmann::json chat_completion_response(const ResponseMeta& meta, const std::vector<CompletionChoice>& choices,
                                        const Usage& usage);

// Streaming. A completions stream sends completion_chunk() per piece of text and one with the finish
// reason last; a chat stream sends, for each choice, chat_role_chunk() first, chat_content_chunk() per
// piece, then chat_finish_chunk(). With stream_options.include_usage, usage_chunk() follows the last choice's
// finish, and sse_done() ends every stream.
nlohmann::json completion_chunk(const ResponseMeta& meta, size_t index, const std::string& text,
                                FinishReason finish_reason = FinishReason::none,
                                const std::vector<TokenLogprobs>* logprobs = nullptr, size_t text_offset = 0);
nlohmann::json chat_role_chunk(const ResponseMeta& meta, size_t index);
nlohmann::json chat_content_chunk(const ResponseMeta& meta, size_t index, const std::string& text,
                                  const std::vector<TokenLogprobs>* logprobs = nullptr);
nlohmann::json chat_finish_chunk(const ResponseMeta& meta, size_t index, FinishReason finish_reason);
// {"delta": {"tool_calls": [{index, id, type, function: {name, arguments}}]}}: a choice's calls, whole.
nlohmann::json chat_tool_calls_chunk(const ResponseMeta& meta, size_t index, const std::vector<ToolCall>& calls);
// {"id", "object", "created", "model", "choices": [], "usage": {...}}.
nlohmann::json usage_chunk(const ResponseMeta& meta, Endpoint endpoint, const Usage& usage);

// "data: <json>\n\n", one server-sent event.
std::string sse_event(const nlohmann::json& payload);
// "data: [DONE]\n\n", OpenAI's end of stream.
std::string sse_done();

// GET /v1/models.
struct ModelCard {
  std::string id;
  int64_t created = 0;
  std::string owned_by = "tokenhost";
  uint32_t context_length = 0;  // the most positions one request holds (0: not stated)
};
// {"object": "list", "data": [{"id", "object": "model", "created", "owned_by", "context_length",
// "max_model_len"}]}: the context under both names clients read (llama-server's and vLLM's).
nlohmann::json models_list(const std::vector<ModelCard>& models);

}  // namespace tokenhost::api
