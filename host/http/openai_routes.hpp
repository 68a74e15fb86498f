// The OpenAI-compatible endpoints of the gateway: POST /v1/completions, POST /v1/chat/completions
// (streamed as server-sent events or answered whole) and GET /v1/models. Requests are parsed and
// answered by host/api/; this file connects them to the Server: tokenizing, starting one sequence
// per choice, reading their token streams, stop strings, and cancelling sequences whose client left.
#pragma once

#include <string>

#include "http/http_listener.hpp"

namespace tokenhost {

class Server;
struct ServerDecl;
struct AdmissionRefusal;

void add_openai_routes(HttpListener& gateway, Server& server);

// The token of the request's "Authorization: Bearer TOKEN" header; "" when none.
std::string bearer_token(const HttpRequest& req);
// Who sent the request, for per-client limits and fair shares (GenerateRequest::client): "key:KEY" when
// the gateway has API keys (a request past the gateway's check carries one of them), else
// "addr:ADDRESS" (without keys, a bearer token proves nothing: a client could send a new one each time).
std::string gateway_client(const HttpRequest& req, const ServerDecl& server);
// Answers a refused admission: its status (429, 503), an OpenAI-shaped error whose code names the
// limit, and Retry-After.
void reply_refusal(HttpResponse& res, const AdmissionRefusal& refusal);

}  // namespace tokenhost
