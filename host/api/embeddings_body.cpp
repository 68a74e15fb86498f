#include "api/embeddings_body.hpp"

#include <algorithm>
#include <cstring>

#include "api/client_json.hpp"

namespace tokenhost::api {
namespace {

using nlohmann::json;

// A list of token ids (each a non-negative integer below 2^31), or why not.
std::optional<ApiError> read_ids(const json& list, const std::string& param, EmbeddingsInput& out) {
  out.is_tokens = true;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      return invalid_request(param, "token at position " + std::to_string(i) + " is not a token id (a non-negative integer)");
    out.tokens.push_back(t.get<int64_t>());
  }
  return std::nullopt;
}

}  // namespace

ApiResult<EmbeddingsBody> parse_embeddings_body(const json& body) {
  if (!body.is_object()) return invalid_request("", "the request body must be a JSON object");
  static const std::vector<std::string> known = {"input", "model", "encoding_format", "dimensions", "user"};
  for (const auto& [key, value] : body.items())
    if (std::find(known.begin(), known.end(), key) == known.end())
      return invalid_request(key, "unknown field '" + key + "' (embeddings take input, model, encoding_format, user)");
  EmbeddingsBody out;
  if (auto m = body.find("model"); m != body.end() && !m->is_null()) {
    if (!m->is_string()) return invalid_request("model", "'model' must be a string");
    out.model = m->get<std::string>();
  }
  if (auto u = body.find("user"); u != body.end() && !u->is_null() && !u->is_string())
    return invalid_request("user", "'user' must be a string");
  if (auto f = body.find("encoding_format"); f != body.end() && !f->is_null()) {
    if (!f->is_string() || (*f != "float" && *f != "base64"))
      return invalid_request("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    out.base64 = *f == "base64";
  }
  if (auto d = body.find("dimensions"); d != body.end() && !d->is_null())
    return invalid_request("dimensions", "'dimensions' is not supported: an embedding has its model's width");
  auto in = body.find("input");
  if (in == body.end() || in->is_null()) return invalid_request("input", "missing field 'input'");
  if (in->is_string()) {
    out.single = true;
    out.inputs.push_back({false, in->get<std::string>(), {}});
  } else if (in->is_array() && !in->empty() && in->front().is_number_integer()) {
    out.single = true;
    EmbeddingsInput x;
    if (auto e = read_ids(*in, "input", x)) return *e;
    out.inputs.push_back(std::move(x));
  } else if (in->is_array() && !in->empty()) {
    if (in->size() > kMaxEmbeddingInputs)
      return invalid_request("input", "at most " + std::to_string(kMaxEmbeddingInputs) + " inputs per request, got " + std::to_string(in->size()));
    for (size_t i = 0; i < in->size(); ++i) {
      const json& x = (*in)[i];
      const std::string param = "input[" + std::to_string(i) + "]";
      EmbeddingsInput e;
      if (x.is_string()) {
        e.text = x.get<std::string>();
      } else if (x.is_array()) {
        if (auto err = read_ids(x, param, e)) return *err;
      } else {
        return invalid_request(param, "each input must be a string or an array of token ids");
      }
      out.inputs.push_back(std::move(e));
    }
  } else {
    return invalid_request("input", "'input' must be a string, an array of strings, or token ids (non-empty)");
  }
  return out;
}

ApiResult<EmbeddingsBody> parse_embeddings_body(std::string_view text) {
  auto read = parse_client_json(text);
  if (!read) return read.error();
  return parse_embeddings_body(read.value());
}

std::string base64_floats(const std::vector<float>& v) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());  // the hosts tokenhost builds for are little-endian
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = (uint32_t(uint8_t(bytes[i])) << 16) | (i + 1 < bytes.size() ? uint32_t(uint8_t(bytes[i + 1])) << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t(uint8_t(bytes[i + 2])) : 0);
    out += table[(n >> 18) & 63];
    out += table[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? table[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? table[n & 63] : '=';
  }
  return out;
}

}  // namespace tokenhost::api
