// One client request's life, for every route of the gateway, without HTTP: its body parsed and
// checked, its prompts tokenized, its admission, one sequence per choice started through the router,
// their tokens read as they come (stop strings, log-probabilities), the answer built (whole, or as
// server-sent events), and the sequences cancelled at the engine that holds them when the client
// leaves or a stop string matches. The transport (host/http/) frames the bytes it is given.
//
// Every request carries an id (request_id.hpp): in the reply's headers, in its sequences, and in every
// log line about it.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "actors/token_stream.hpp"

namespace tokenhost {
class Gateway;
}

namespace tokenhost::request {

enum class Route {
  completions,       // POST /v1/completions (OpenAI)
  chat_completions,  // POST /v1/chat/completions (OpenAI)
  generate,          // POST /v1/generate: tokenhost's own, one prompt, greedy, answered whole
};

// What the transport knows of the caller.
struct Caller {
  std::string request_id;   // request_id_from() of the client's X-Request-Id
  std::string session_key;  // X-Session-Key, "" when absent
  std::string api_key;      // the bearer token, "" when absent
  // Who sent it, for per-client limits and fair shares (GenerateRequest::client).
  std::string client;
  std::string address;      // "host:port", for log lines
};

// An answer the transport writes as it is (with the request id's header added).
struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class ClientRequest {
 public:
  // Parses body for route, admits the request and starts its sequences. A refusal (bad input, an
  // unknown model, admission) comes back as the Reply to send; nothing was started then.
  static std::variant<Reply, std::shared_ptr<ClientRequest>> begin(Gateway& gateway, Route route, const std::string& body,
                                                                  Caller caller);
  ~ClientRequest();  // cancels the sequences still running and hands its admission back

  const std::string& id() const;
  // Answered as server-sent events (text/event-stream) rather than whole.
  bool streaming() const;
  // Changes whenever any of its sequences does: the transport calls advance() then.
  const std::shared_ptr<StreamSignal>& signal() const;

  struct Progress {
    std::string events;          // streaming: event-stream text to write now (may be empty)
    std::optional<Reply> reply;  // answered whole: the answer, once done
    bool done = false;           // nothing more will come
  };
  // Takes what the sequences produced since the last call. Never blocks.
  Progress advance();
  // The client went away or reads too slowly (why, for the log): every sequence ends now.
  void abandon(const std::string& why);

  struct State;  // client_request.cpp

 private:
  explicit ClientRequest(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace tokenhost::request
