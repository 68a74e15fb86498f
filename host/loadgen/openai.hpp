// The OpenAI-compatible wire format the load generator speaks: request bodies for /v1/completions and
// /v1/chat/completions, and the reading of streamed chunks, whole responses and error bodies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tokenhost::loadgen {

struct BodyOptions {
  bool chat = false;        // /v1/chat/completions (one user message) instead of /v1/completions
  std::string model;        // empty: no "model" field
  bool stream = true;       // "stream": true with "stream_options": {"include_usage": true}
  bool ignore_eos = false;  // "ignore_eos": true (a vLLM / llama.cpp extension)
  // A JSON object whose members are added to every body, replacing those of the same name
  // ({"temperature": 0}, say); "" for none. parse_extra_body() checks it first.
  std::string extra;
};

// Checks an --extra-body value: "" or a JSON object. Throws std::invalid_argument naming what is wrong.
void parse_extra_body(const std::string& text);

// history: a conversation's earlier turns, user and assistant texts alternating (Prompt::history).
// Chat: they are messages before the user message `prompt`. Completions: the prompt is each user text
// followed by its answer and a newline, then `prompt` (the text a model continued, as it continued it).
std::string request_body(const BodyOptions& o, const std::string& prompt, uint32_t max_tokens,
                         const std::vector<std::string>& history = {});

// One streamed event's data, or a whole non-streamed response.
struct Chunk {
  bool done = false;          // the "[DONE]" sentinel
  std::string text;           // the generated text it carries (choices[0].text or .delta.content)
  bool finished = false;      // a choice has a non-null finish_reason
  std::optional<uint64_t> completion_tokens, prompt_tokens;  // from "usage" when present
  std::optional<std::string> error;                          // an {"error": ...} object
};

// Throws std::runtime_error naming the problem ("not JSON: ...") when data is not JSON of the expected
// shape.
Chunk parse_chunk(const std::string& data);

// The message of an error response body: error.message (or error as a string, or message) from
// JSON, otherwise the body itself, trimmed and cut to 300 characters.
std::string error_message(const std::string& body);

}  // namespace tokenhost::loadgen
