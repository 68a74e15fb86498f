// The OpenAI-compatible endpoints of the gateway: POST /v1/completions, POST /v1/chat/completions
// (streamed as server-sent events or answered whole) and GET /v1/models. Requests are parsed and
// answered by host/api/; this file connects them to the Server: tokenizing, starting one sequence
// per choice, reading their token streams, stop strings, and cancelling sequences whose client left.
#pragma once

#include "http/http_listener.hpp"

namespace tokenhost {

class Server;

void add_openai_routes(HttpListener& gateway, Server& server);

}  // namespace tokenhost
