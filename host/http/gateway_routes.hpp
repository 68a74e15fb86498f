// The gateway's generation routes: POST /v1/completions and /v1/chat/completions (OpenAI; answered
// whole or as server-sent events), POST /v1/generate (tokenhost's own) and GET /v1/models. A request's
// life (parsing, admission, routing, its sequences, cancelling them) is host/request/'s; this file
// frames what it produces as HTTP and tells it when the client goes away.
#pragma once

#include <string>

#include "http/http_listener.hpp"

namespace tokenhost {

class Gateway;
struct ServerDecl;

void add_gateway_routes(HttpListener& gateway, Gateway& entry, const ServerDecl& server);

// The token of the request's "Authorization: Bearer TOKEN" header; "" when none.
std::string bearer_token(const HttpRequest& req);
// Who sent the request, for per-client limits and fair shares (request::Caller::client): "key:KEY" when
// the gateway has API keys (a request past the gateway's check carries one of them), else
// "addr:ADDRESS" (without keys, a bearer token proves nothing: a client could send a new one each time).
std::string gateway_client(const HttpRequest& req, const ServerDecl& server);

}  // namespace tokenhost
