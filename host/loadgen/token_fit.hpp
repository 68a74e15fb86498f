// Prompts of an exact length in the served model's tokens. A synthetic prompt of N words is about N
// tokens with the usual vocabularies, but not with every one (make-model's spends about two a word).
// With the server's tokenizer at hand (POST /tokenize and /detokenize: llama-server's and tokenhost's
// shape, {"content"} and {"tokens"}; or vLLM's, {"prompt"} and {"tokens"} with the model), a prompt is
// cut to its first N tokens (decoded back to text) or lengthened with more words first. Counts leave
// out special tokens (the server adds its BOS; usage.prompt_tokens counts it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loadgen/client.hpp"

namespace tokenhost::loadgen {

class TokenFitter {
 public:
  // Asks the server for its tokenizer; available() says whether it has one of the two shapes.
  explicit TokenFitter(const EndpointOptions& endpoint);
  ~TokenFitter();
  bool available() const { return !api_.empty(); }
  const std::string& api() const { return api_; }  // "tokenize" (llama-server, tokenhost) or "vllm"; "" none
  const std::string& why_not() const { return why_not_; }

  // text cut to n tokens, or lengthened (with common words) and cut. Throws std::runtime_error naming the
  // endpoint when the server fails to answer.
  std::string fit(const std::string& text, uint32_t n);
  // Prompts whose text, tokenized again after the cut, is not n tokens (a merge across the cut): their
  // length is off by one or two.
  uint64_t inexact() const { return inexact_; }

 private:
  std::vector<int32_t> tokenize(const std::string& text);
  std::string detokenize(const std::vector<int32_t>& tokens);

  EndpointOptions endpoint_;
  std::string base_path_;
  std::unique_ptr<HttpClient> http_;
  std::string api_, why_not_;
  uint64_t inexact_ = 0;
};

}  // namespace tokenhost::loadgen
