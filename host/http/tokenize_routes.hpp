// POST /tokenize and POST /detokenize on the gateway, in llama-server's shape: text to the served
// model's token ids (optionally with each token's piece) and ids back to text. A "model" field picks
// the model when the server serves several (default: the first engine's).
#pragma once

#include "http/http_listener.hpp"

namespace tokenhost {

class Gateway;
void add_tokenize_routes(HttpListener& gateway, Gateway& server);

}  // namespace tokenhost
