// A generation request as the actors carry it, its result, and the per-sequence state an engine
// lends its worker during a step.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/request_defaults.hpp"
#include "speculation/draft_limits.hpp"
#include "runtime/sampling.hpp"

namespace tokenhost {

class TokenStream;

// A client's request, once the gateway has parsed and tokenized it.
struct GenerateRequest {
  // The sequence's id, unique in this server (a request of n choices has n sequences): what the
  // engines, the router's cancel and the kvcache plugins know it by.
  uint64_t id = 0;
  // The client request it belongs to (request/request_id.hpp: X-Request-Id or one the gateway made),
  // for log lines; "" for in-process callers.
  std::string request_id;
  std::vector<int32_t> prompt;
  // The prompt as text, for router plugins that read it (th_route_request.prompt); "" when the client
  // sent tokens.
  std::string prompt_text;
  uint32_t max_tokens = kGenerateRouteMaxTokens;
  int32_t priority = 0;
  std::string session_key;
  // What an A/B experiment reads (host/experiments): the `user` field, the gateway request's bearer
  // token, and the `tokenhost` extension's arm choice and request class ("" when absent).
  std::string user;
  std::string api_key;
  std::string arm;
  std::string request_class;
  // Who sent it, for fair shares (the scheduler's th_sched_state.seq_clients, the gateway's per-client
  // limits): "key:" and the API key, else "addr:" and the client's address; "" for in-process callers.
  std::string client;
  std::string model;          // the model to serve it: engines of other models are not candidates; "" any
  SamplingParams sampling;    // greedy by default
  bool seeded = false;        // the client fixed sampling.seed (else it was drawn for this request)
  bool logprobs = false;      // return each token's log-probability (and sampling.top_logprobs best)
  // Also return the prompt's (GenerateResult::prompt_logprobs; OpenAI's echo with logprobs). Such a
  // request reuses no cached prefix (every prompt row is computed) and may ask max_tokens 0: the
  // prompt scored, nothing generated.
  bool prompt_logprobs = false;
  bool ignore_eos = false;    // generate past the end-of-sequence token, up to max_tokens
  // Speculative decoding: the most draft tokens a step verifies for this request (0: none), within
  // the engine's own limit.
  uint32_t max_draft = kMaxDraftTokens;
  // Prefix caching: the request's `cache_salt` ("" none). Cached KV is shared only between requests of
  // the same API key and cache_salt (timing would show a prompt another client sent).
  std::string cache_salt;
  // Structured output: what the generated text must be (the engine's constraint plugin masks each
  // token before sampling); NULL: unconstrained.
  std::shared_ptr<const ConstraintSource> constraint;
  // Where the engine pushes each token as it is sampled (streaming, cancellation); may be NULL.
  std::shared_ptr<TokenStream> stream;
  // Whether the stream's tokens reach a client as they come (an event stream). false: the client is
  // answered whole, so an engine may hold the tokens back until the end; a remote engine does
  // (cluster/engine_proxy.hpp), and when its node is lost mid-sequence it hands the sequence back
  // with the tokens nobody saw, for the router to run it again elsewhere (once: reruns).
  bool live = true;
  // Times the router ran it again after a lost node's engine had produced tokens for it.
  uint32_t reruns = 0;
  // Prefill/decode disaggregation's first stage (TH_ROUTE_DISAGGREGATE): the engine answers only once
  // its KV connectors have stored the prompt's blocks (at most 2 s: kKvHandoffWaitNs), for the decode engine
  // to load them.
  bool kv_handoff = false;

  // How log lines name it: "request ID (sequence N)", or "sequence N" without a request id.
  std::string label() const {
    return request_id.empty() ? "sequence " + std::to_string(id) : "request " + request_id + " (sequence " + std::to_string(id) + ")";
  }
};

// One engine's part in answering a request (a cascade has one per stage it ran, an ensemble one per
// answer): what the response's `tokenhost.path` shows.
struct RouteHop {
  std::string engine, model;
  // "answered" (its tokens are the answer), "escalated" (a cascade moved on), "outvoted" (an
  // ensemble chose another), "failed" (it ended with an error; the cascade moved on), "prefilled" (a
  // disaggregated request's prefill engine: the prompt and the first token, then the decode engine).
  std::string outcome;
  uint32_t tokens = 0;  // generated there
  double mean_logprob = 0, min_logprob = 0, mean_entropy = 0;
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::string finish_reason;  // "length", "stop" (end of sequence), "cancelled", "error"; between
                              // actors also kRerouted
  std::string engine;
  std::string error;          // set when finish_reason == "error"
  std::vector<SampledToken> logprobs;  // one per token when the request asked for them
  // With prompt_logprobs: the log-probability of each prompt token after the first given the ones
  // before it (and the sampling.top_logprobs best there), prompt.size() - 1 of them.
  std::vector<SampledToken> prompt_logprobs;
  // As the engine measured them, from the request's arrival there: to the first token, the mean gap
  // between successive tokens, to the end. Absent when there was no such token or no end.
  std::optional<double> ttft_s, itl_s, e2e_s;
  // Set by the router: the model that answered (a group's member; "" for a cached answer), the
  // engines that worked on it, whether a router's cache answered, and the cost accounted (the sum
  // over those engines of their cost_per_mtok x (prompt + generated tokens) / 1e6).
  std::string model;
  std::vector<RouteHop> path;
  bool cached = false;
  double cost = 0;
  // Refused by a node's own admission (a cluster's worker enforces its [limits] on heads' sequences):
  // the HTTP status to answer with (429, 503) and Retry-After seconds; 0 when not refused.
  uint32_t refused_status = 0, retry_after_s = 0;
  // The refusal's reason for the client's error code and the metrics ("breaker_open", "overloaded";
  // "" a node's admission).
  std::string refused_code;

  // An engine that retires hands back the requests it has not started: the router routes them again.
  static constexpr const char* kRerouted = "rerouted";

  static GenerateResult failed(std::string engine, std::string error) {
    GenerateResult r;
    r.finish_reason = "error";
    r.engine = std::move(engine);
    r.error = std::move(error);
    return r;
  }
};

}  // namespace tokenhost
