// The error every OpenAI-facing step reports, and a value-or-error result for the steps that can fail.
// Errors are values, not exceptions: a bad request is an expected outcome that the gateway turns into a
// 4xx response, and the caller must not be able to forget to catch it.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

namespace tokenhost::api {

// One OpenAI-style error. `param` names the offending field the way a client wrote it
// ("max_tokens", "messages[2].content", "stop[1]") so the client can find it without reading the message.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" = not about one field (serialized as null)
  std::string code;   // "" = none (serialized as null)

  // {"error": {"message", "type", "param", "code"}}, OpenAI's shape; empty param/code become null.
  nlohmann::json to_json() const;
};

// A 400 invalid_request_error about `param`.
ApiError invalid_request(std::string param, std::string message, std::string code = {});

// A value or the error that prevented it (std::expected is C++23).
template <class T>
class ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}            // NOLINT: implicit by design, like std::expected
  ApiResult(ApiError error) : v_(std::move(error)) {}     // NOLINT

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  const ApiError& error() const { return std::get<1>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, ApiError> v_;
};

// Serializes for the wire. Token text can hold a partial UTF-8 character (byte-level tokens), which
// nlohmann::json refuses to dump by default; invalid bytes become U+FFFD here instead of throwing.
std::string dump_json(const nlohmann::json& j);

}  // namespace tokenhost::api
