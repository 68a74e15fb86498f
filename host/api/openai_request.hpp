// Parsing and validating the bodies of POST /v1/completions and POST /v1/chat/completions.
//
// The result is a typed request the gateway can hand to the engine without looking at JSON again.
// Every refusal is an ApiError (400) whose `param` names the field as the client wrote it and whose
// message says what was expected and what was received. Fields OpenAI clients send that we do not use
// are ignored but listed in `ignored_fields`, so the gateway can log them; optional fields given as
// null count as absent, as in OpenAI's API.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/api_error.hpp"
#include "api/chat_template.hpp"
#include "api/response_format.hpp"
#include "runtime/sampling.hpp"

namespace tokenhost::api {

enum class Endpoint { completions, chat_completions };

// One completions prompt: text, or token ids the client tokenized itself.
// The longest `cache_salt` a request may carry.
constexpr size_t kMaxCacheSaltChars = 256;

struct Prompt {
  std::string text;
  std::vector<int32_t> tokens;
  bool is_tokens = false;
};

// Limits the caller sets per deployment.
struct RequestLimits {
  // Upper bound for max_tokens, typically the model's context length; 0 = no bound here (the context
  // check, check_context(), still applies once the prompt is tokenized).
  int64_t max_tokens_limit = 0;
  // Completions only: how many prompts one request may batch.
  size_t max_prompts = 16;
  size_t max_n = 16;
  size_t max_sequences = 16;  // prompts x n: the sequences one request starts
  size_t max_stop = 4;
  int max_top_logprobs = 20;
};

struct OpenAIRequest {
  Endpoint endpoint = Endpoint::completions;
  std::string model;  // "" = the server's default model

  // completions: one or more prompts. A batch ("prompt": ["a", "b"], or an array of token arrays) is
  // served as independent requests; choice k of prompt p has index p * n + k in the response, as in
  // OpenAI's API.
  std::vector<Prompt> prompts;
  // chat: the conversation, content parts joined, "developer" mapped to "system".
  std::vector<ChatMessage> messages;

  // completions `max_tokens`; chat `max_completion_tokens` or its older name `max_tokens`. Absent =
  // the deployment's default_max_tokens ([limits], 512 unless set) or up to the end of the context,
  // whichever is less (OpenAI's legacy completions default of 16 is not applied).
  std::optional<int64_t> max_tokens;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;  // extension; 0 = off
  double min_p = 0.0;  // extension; 0 = off
  double repetition_penalty = 1.0;  // extension; 1 = off
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  std::optional<int64_t> seed;
  int64_t n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // completions `logprobs: k` sets both (k may be 0: the chosen token's logprob only);
  // chat sets them from `logprobs: bool` and `top_logprobs`.
  bool logprobs = false;
  int64_t top_logprobs = 0;
  bool echo = false;  // completions: prepend the prompt to the text (with logprobs, its tokens' log-probabilities too; not streamed)
  std::map<int32_t, double> logit_bias;  // token id -> bias in [-100, 100]
  std::string user;
  // Prefix caching: requests share cached KV only under the same API key and cache_salt (as vLLM's);
  // at most kMaxCacheSaltChars characters.
  std::string cache_salt;
  int64_t priority = 0;  // extension: larger = sooner; scheduler plugins interpret it
  nlohmann::json tokenhost = nlohmann::json::object();  // the `tokenhost` extension object as sent
  std::string arm;            // tokenhost.arm: an arm of the model's A/B experiment, "" none
  std::string request_class;  // tokenhost.class: the request's class for experiment hold-backs, "" none
  // tokenhost.speculate / tokenhost.max_draft: the most draft tokens per step speculative decoding may
  // verify for this request (0: none; speculate false is 0); unset: the engine decides.
  std::optional<uint32_t> max_draft;
  // Structured output: `response_format` (json_object, json_schema) or `tokenhost.grammar`; NULL: none.
  std::shared_ptr<const ConstraintSource> constraint;
  // chat `tools`, `tool_choice` and `parallel_tool_calls` (tool_choice as sent until parse_request reads it).
  ToolRequest tools;
  nlohmann::json tool_choice;

  std::vector<std::string> ignored_fields;  // top-level fields not understood, sorted by name
};

// `body` must already be parsed; anything but an object is refused.
ApiResult<OpenAIRequest> parse_request(Endpoint endpoint, const nlohmann::json& body, const RequestLimits& limits = {});

// The same from the raw HTTP body; malformed JSON is a 400 that gives the byte offset of the problem.
ApiResult<OpenAIRequest> parse_request(Endpoint endpoint, std::string_view body, const RequestLimits& limits = {});

// Once the prompt is tokenized: refuses a prompt that leaves no room in the context, or a max_tokens
// that does not fit after it (400, code "context_length_exceeded", messages like "prompt has 5000
// tokens, model context is 4096"). Returns the number of tokens to generate: max_tokens, or when it is
// absent default_max_tokens (the deployment's [limits]; 0: no default) or what is left of the context,
// whichever is smaller. `param` names the field blamed ("prompt" or "messages").
ApiResult<int64_t> check_context(int64_t prompt_tokens, std::optional<int64_t> max_tokens, int64_t context_length,
                                 const std::string& param = "prompt", int64_t default_max_tokens = 0);

// The sampler's settings for one choice of the request. OpenAI leaves the seed optional; a request
// without one gets `fallback_seed`, which the caller draws so unseeded requests differ.
SamplingParams sampling_params(const OpenAIRequest& request, uint64_t fallback_seed);

}  // namespace tokenhost::api
