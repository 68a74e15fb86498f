#include "http/tokenize_routes.hpp"

#include "api/openai_response.hpp"
#include "http/admin_json.hpp"
#include "server/gateway.hpp"

namespace tokenhost {
namespace {

using nlohmann::json;

// The model the body names ("" or absent: the default), or NULL after answering 404 / 400.
const ServedModel* model_of(Gateway& server, const json& body, HttpResponse& res) {
  const auto it = body.find("model");
  if (it != body.end() && !it->is_string()) {
    reply_error(res, 400, "'model' must be a string", "invalid_request_error");
    return nullptr;
  }
  const std::string name = it == body.end() ? std::string() : it->get<std::string>();
  const ServedModel* m = server.find_model(name);
  if (m == nullptr) reply_error(res, 404, "model '" + name + "' does not exist", "invalid_request_error");
  return m;
}

std::optional<bool> flag(const json& body, const char* key, HttpResponse& res) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_boolean()) {
    reply_error(res, 400, std::string("'") + key + "' must be a boolean", "invalid_request_error");
    return std::nullopt;
  }
  return it->get<bool>();
}

}  // namespace

void add_tokenize_routes(HttpListener& gateway, Gateway& server, size_t max_answer_bytes) {
  gateway.route("POST", "/tokenize", [&server, max_answer_bytes](const HttpRequest& req, HttpResponse& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    const ServedModel* m = model_of(server, *body, res);
    if (m == nullptr) return;
    const auto content = body->find("content");
    if (content == body->end() || !content->is_string())
      return reply_error(res, 400, "'content' (the text to tokenize, a string) is required", "invalid_request_error");
    const auto add_special = flag(*body, "add_special", res);  // a BOS first, when the model has one
    const auto with_pieces = flag(*body, "with_pieces", res);
    if (!add_special || !with_pieces) return;
    const std::vector<int32_t> tokens = m->encode(content->get<std::string>(), *add_special, true);
    // Written as text, not built as a JSON document (a document of objects costs ~100 bytes a token),
    // and bounded: an answer can outgrow its request many times over (with_pieces: 15x).
    std::string out = "{\"tokens\":[";
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ',';
      if (*with_pieces)
        out += "{\"id\":" + std::to_string(tokens[i]) + ",\"piece\":" + api::dump_json(m->piece(tokens[i])) + "}";
      else
        out += std::to_string(tokens[i]);
      if (out.size() > max_answer_bytes)
        return reply_error(res, 413, "the answer (" + std::to_string(tokens.size()) + " tokens" + (*with_pieces ? " with pieces" : "") +
                                         ") would be larger than the limit of " + std::to_string(max_answer_bytes) +
                                         " bytes; tokenize less text per request" + (*with_pieces ? " or leave out with_pieces" : ""),
                           "invalid_request_error");
    }
    out += "]}";
    res.set_content(std::move(out), "application/json");
  });
  gateway.route("POST", "/detokenize", [&server](const HttpRequest& req, HttpResponse& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    const ServedModel* m = model_of(server, *body, res);
    if (m == nullptr) return;
    const auto tokens = body->find("tokens");
    if (tokens == body->end() || !tokens->is_array())
      return reply_error(res, 400, "'tokens' (an array of token ids) is required", "invalid_request_error");
    std::string text;
    for (size_t i = 0; i < tokens->size(); ++i) {
      const json& t = (*tokens)[i];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= int64_t(m->vocab_size))
        return reply_error(res, 400, "'tokens[" + std::to_string(i) + "]' is not a token id of model " + m->name + " (0 to " +
                                         std::to_string(m->vocab_size - 1) + ")", "invalid_request_error");
      text += m->piece(int32_t(t.get<int64_t>()));
    }
    res.set_content(api::dump_json(json{{"content", text}}), "application/json");
  });
}

}  // namespace tokenhost
