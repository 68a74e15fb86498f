#include "request/embeddings_request.hpp"

#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api/embeddings_body.hpp"
#include "server/gateway.hpp"

namespace tokenhost::request {
namespace {

using nlohmann::json;

Reply error(const api::ApiError& e) {
  Reply r;
  r.status = e.http_status;
  r.body = api::dump_json(e.to_json());
  return r;
}

}  // namespace

Reply embeddings(Gateway& gateway, const std::string& body_text, const Caller& caller) {
  auto parsed = api::parse_embeddings_body(std::string_view(body_text));
  if (!parsed) return error(parsed.error());
  const api::EmbeddingsBody& body = parsed.value();
  const ServedModel* model = gateway.find_model(body.model);
  if (model == nullptr) {
    api::ApiError e = api::invalid_request("model", "model '" + body.model + "' does not exist", "model_not_found");
    e.http_status = 404;
    return error(e);
  }
  // Tokenized with the model's tokenizer, BOS first as llama-server's embeddings do; ids checked
  // against its vocabulary; each within its context.
  std::vector<std::vector<int32_t>> inputs;
  int64_t total = 0;
  for (size_t i = 0; i < body.inputs.size(); ++i) {
    const auto& in = body.inputs[i];
    std::vector<int32_t> tokens;
    if (in.is_tokens) {
      for (size_t k = 0; k < in.tokens.size(); ++k) {
        if (in.tokens[k] >= int64_t(model->vocab_size))
          return error(api::invalid_request(body.param(i), "token " + std::to_string(in.tokens[k]) + " at position " + std::to_string(k) +
                                                               " is outside the vocabulary of model " + model->name + " (" +
                                                               std::to_string(model->vocab_size) + " tokens)"));
        tokens.push_back(int32_t(in.tokens[k]));
      }
    } else {
      tokens = model->encode(in.text, true, false);
    }
    if (tokens.empty()) return error(api::invalid_request(body.param(i), "the input is empty"));
    if (tokens.size() > model->context_len)
      return error(api::invalid_request(body.param(i), "the input has " + std::to_string(tokens.size()) + " tokens; model " + model->name +
                                                           " takes at most " + std::to_string(model->context_len)));
    total += int64_t(tokens.size());
    inputs.push_back(std::move(tokens));
  }
  std::vector<std::vector<float>> vectors;
  try {
    vectors = gateway.embed(model->name, inputs);
  } catch (const std::exception& e) {
    api::ApiError err;
    err.http_status = 500;
    err.type = "server_error";
    err.message = std::string("embeddings failed: ") + e.what();
    spdlog::error("request {}: embeddings on model {} failed: {}", caller.request_id, model->name, e.what());
    return error(err);
  }
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i)
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", body.base64 ? json(api::base64_floats(vectors[i])) : json(vectors[i])}});
  Reply r;
  r.body = api::dump_json({{"object", "list"}, {"data", data}, {"model", model->name},
                           {"usage", {{"prompt_tokens", total}, {"total_tokens", total}}}});
  spdlog::debug("request {}: embeddings on model {}, {} input(s), {} tokens", caller.request_id, model->name, inputs.size(), total);
  return r;
}

}  // namespace tokenhost::request
