#include "loadgen/token_fit.hpp"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "loadgen/openai.hpp"

namespace tokenhost::loadgen {

namespace {

const char* const kFiller = " and the";  // two common words, a token or so each

}  // namespace

TokenFitter::TokenFitter(const EndpointOptions& endpoint)
    : endpoint_(endpoint), base_path_(parse_url(endpoint.url).base_path), http_(std::make_unique<HttpClient>(connect_to(endpoint))) {
  for (const char* api : {"tokenize", "vllm"}) {
    api_ = api;
    try {
      if (tokenize("hello world").empty()) throw std::runtime_error("no tokens for 'hello world'");
      (void)detokenize(tokenize("hello"));
      return;
    } catch (const std::exception& e) {
      why_not_ += std::string(why_not_.empty() ? "" : "; ") + api + ": " + e.what();
    }
  }
  api_.clear();
}

TokenFitter::~TokenFitter() = default;

std::vector<int32_t> TokenFitter::tokenize(const std::string& text) {
  nlohmann::json body = api_ == "vllm" ? nlohmann::json{{"prompt", text}, {"add_special_tokens", false}}
                                       : nlohmann::json{{"content", text}, {"add_special", false}};
  if (!endpoint_.model.empty()) body["model"] = endpoint_.model;
  const HttpClientResult r = http_->request("POST", base_path_ + "/tokenize", body.dump(), "application/json");
  if (!r.ok()) throw std::runtime_error("POST /tokenize: " + r.message);
  if (r.status != 200) throw std::runtime_error("POST /tokenize: HTTP " + std::to_string(r.status) + ": " + error_message(r.body));
  const auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array()) throw std::runtime_error("POST /tokenize: no tokens in the answer");
  std::vector<int32_t> out;
  for (const auto& t : j["tokens"]) {
    if (!t.is_number_integer()) throw std::runtime_error("POST /tokenize: a token that is not an id");
    out.push_back(t.get<int32_t>());
  }
  return out;
}

std::string TokenFitter::detokenize(const std::vector<int32_t>& tokens) {
  nlohmann::json body{{"tokens", tokens}};
  if (!endpoint_.model.empty()) body["model"] = endpoint_.model;
  const HttpClientResult r = http_->request("POST", base_path_ + "/detokenize", body.dump(), "application/json");
  if (!r.ok()) throw std::runtime_error("POST /detokenize: " + r.message);
  if (r.status != 200) throw std::runtime_error("POST /detokenize: HTTP " + std::to_string(r.status) + ": " + error_message(r.body));
  const auto j = nlohmann::json::parse(r.body, nullptr, false);
  const char* key = api_ == "vllm" ? "prompt" : "content";
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) throw std::runtime_error(std::string("POST /detokenize: no ") + key + " in the answer");
  return j[key].get<std::string>();
}

std::string TokenFitter::fit(const std::string& text, uint32_t n) {
  if (!available()) throw std::logic_error("TokenFitter::fit without a tokenizer");
  std::string t = text;
  std::vector<int32_t> tokens = tokenize(t);
  for (int round = 0; tokens.size() < n && round < 8; ++round) {
    for (size_t k = tokens.size(); k < n; k += 2) t += kFiller;
    tokens = tokenize(t);
  }
  if (tokens.size() == n) return t;
  if (tokens.size() > n) {
    tokens.resize(n);
    t = detokenize(tokens);
  }
  if (tokenize(t).size() == n) return t;
  // Some servers' /detokenize keeps the space a SentencePiece tokenizer puts before the text, which
  // the next tokenize adds again.
  if (!t.empty() && t.front() == ' ' && tokenize(t.substr(1)).size() == n) return t.substr(1);
  ++inexact_;
  return t;
}

}  // namespace tokenhost::loadgen
