// POST /tokenize and POST /detokenize on the gateway, in llama-server's shape: text to the served
// model's token ids (optionally with each token's piece) and ids back to text. A "model" field picks
// the model when the server serves several (default: the first engine's).
#pragma once

#include "http/http_listener.hpp"

namespace tokenhost {

class Gateway;
// max_answer_bytes: the largest /tokenize answer (past it, 413): an answer can outgrow its request.
void add_tokenize_routes(HttpListener& gateway, Gateway& server, size_t max_answer_bytes);

}  // namespace tokenhost
