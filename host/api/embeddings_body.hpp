// POST /v1/embeddings' body as OpenAI defines it, read strictly: "input" (a string, an array of
// strings, an array of token ids, or an array of such arrays; non-empty, at most 2048 inputs),
// "model", "encoding_format" ("float" or "base64"), "user"; "dimensions" is refused (an embedding has
// its model's width). Tokenizing and the vocabulary check are the caller's (request/).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/api_error.hpp"

namespace tokenhost::api {

struct EmbeddingsInput {
  bool is_tokens = false;
  std::string text;             // !is_tokens
  std::vector<int64_t> tokens;  // is_tokens: as sent (each >= 0; the vocabulary is checked later)
};

struct EmbeddingsBody {
  std::string model;  // "" when absent: the default model
  std::vector<EmbeddingsInput> inputs;
  bool single = false;  // one input (a string, or one list of ids): errors name "input", else "input[i]"
  bool base64 = false;  // encoding_format "base64": little-endian float32 bytes, base64
  std::string param(size_t i) const { return single ? "input" : "input[" + std::to_string(i) + "]"; }
};

// At most this many inputs in one request (OpenAI's bound).
constexpr size_t kMaxEmbeddingInputs = 2048;

ApiResult<EmbeddingsBody> parse_embeddings_body(const nlohmann::json& body);
ApiResult<EmbeddingsBody> parse_embeddings_body(std::string_view body);  // parse_client_json first

// v's bytes (little-endian float32), base64-encoded with padding.
std::string base64_floats(const std::vector<float>& v);

}  // namespace tokenhost::api
