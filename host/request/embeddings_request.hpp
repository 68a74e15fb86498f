// POST /v1/embeddings without HTTP: the body read (OpenAI's shape: "input" a string, an array of strings,
// an array of token ids, or an array of such arrays; "model"; "encoding_format" float or base64), each
// input tokenized and checked against the model's context, embedded (mean pooling of the last hidden
// state, unit length: Generator::embed), and the answer built.
#pragma once

#include <string>

#include "request/client_request.hpp"

namespace tokenhost::request {

// The answer to write (its status 200 with the embeddings, or an OpenAI-shaped error naming the field).
Reply embeddings(Gateway& gateway, const std::string& body, const Caller& caller);

}  // namespace tokenhost::request
