#include "api/client_json.hpp"

namespace tokenhost::api {
namespace {
using nlohmann::json;

struct TooDeep {};
struct TooMany {};

// The library's message without its "[json.exception.x.y] " prefix.
std::string plain(const json::exception& e) {
  std::string what = e.what();
  if (auto at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
  return what;
}
}  // namespace

ApiResult<json> parse_client_json(std::string_view text, int max_depth, size_t max_values) {
  std::string last_key;  // the field a failing value belongs to
  size_t values = 0;
  auto bound = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key) last_key = parsed.get<std::string>();
    const bool opens = event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
    if (opens && depth >= max_depth) throw TooDeep{};
    if ((opens || event == json::parse_event_t::value) && ++values > max_values) throw TooMany{};
    return true;
  };
  try {
    return json::parse(text, bound);
  } catch (const TooDeep&) {
    return invalid_request("", "the request body nests objects and arrays deeper than " + std::to_string(max_depth) + " levels",
                           "invalid_json");
  } catch (const TooMany&) {
    return invalid_request("", "the request body holds more than " + std::to_string(max_values) +
                                   " JSON values (numbers, strings, objects, arrays)",
                           "invalid_json");
  } catch (const json::parse_error& e) {
    return invalid_request("", "the request body is not valid JSON (byte " + std::to_string(e.byte) + "): " + plain(e),
                           "invalid_json");
  } catch (const json::out_of_range& e) {  // a number past a double's range ("1e400")
    return invalid_request(last_key, (last_key.empty() ? std::string("a number") : "'" + last_key + "'") +
                                         " is out of range: " + plain(e),
                           "invalid_json");
  } catch (const json::exception& e) {
    return invalid_request(last_key, "the request body cannot be read as JSON: " + plain(e), "invalid_json");
  }
}

}  // namespace tokenhost::api
