// One connection to an OpenAI-compatible server: sends a completion request, streamed or not, and
// records when each piece of text arrived.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "http/http_client.hpp"
#include "loadgen/prompts.hpp"

namespace tokenhost::loadgen {

struct Target {
  bool tls = false;  // https://
  std::string host;
  int port = 80;     // 443 for https:// without a port
  std::string base_path;  // "" or "/prefix" (no trailing slash; a trailing "/v1" is dropped)
};

// "http[s]://HOST[:PORT][/PREFIX]"; throws std::invalid_argument for anything else.
Target parse_url(const std::string& url);

struct EndpointOptions {
  std::string url;          // the server's base URL, without /v1
  bool chat = false;        // /v1/chat/completions instead of /v1/completions
  std::string model;        // empty: no "model" field
  std::string api_key;      // empty: no Authorization header
  std::string ca_file;      // https: PEM certificates to trust ("": the system's)
  bool insecure = false;    // https: take any certificate
  bool stream = true;
  bool ignore_eos = false;
  std::string extra_body;  // BodyOptions::extra
  double timeout_s = 600;   // read timeout per request
};

struct RequestResult {
  bool ok = false;
  std::string error;                  // why it failed
  double start_s = 0;                 // when it was sent, seconds since the run began
  double latency_s = 0;               // end to end: sent until the response ended
  std::vector<double> token_times_s;  // arrival of each piece with text, seconds after sending
  uint64_t output_tokens = 0;         // usage.completion_tokens, else the number of pieces with text
  std::optional<uint64_t> prompt_tokens;  // usage.prompt_tokens when the server sent it
  uint32_t prompt_words = 0;          // the synthetic prompt's length in words
  uint32_t turn = 0;                  // its turn in a conversation (0: the first, or no conversation)
  std::string text;                   // the generated text (kept for a conversation's next turn)
};

class Client {
 public:
  explicit Client(const EndpointOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends one request (blocking). live_tokens, when given, is incremented as text arrives.
  RequestResult send(const Prompt& prompt, std::atomic<uint64_t>* live_tokens = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct ModelsProbe {
  bool reachable = false;  // the server answered (any HTTP status)
  std::string error;       // why it did not, or why no model came back
  std::optional<std::string> first_model;  // data[0].id of GET /v1/models
};

// GET /v1/models, with the API key when there is one.
ModelsProbe probe_models(const EndpointOptions& options);

// A connection to the endpoint's server (its TLS and API key, a read timeout of timeout_s).
HttpClient connect_to(const EndpointOptions& options);

}  // namespace tokenhost::loadgen
