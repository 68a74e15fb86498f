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

// nlohmann's DOM builder, counting as it goes. Not json::parse with a callback: its builder then
// looks through the enclosing container for discarded values at every object's end, which makes
// {"a":[{},{},...]} quadratic in the objects (1M objects held an I/O thread for minutes). Forwarding
// the SAX events to the plain builder keeps parsing linear in the body whatever its shape.
class BoundedDomBuilder {
 public:
  BoundedDomBuilder(json& result, int max_depth, size_t max_values) : dom_(result), max_depth_(max_depth), max_values_(max_values) {}
  const std::string& last_key() const { return last_key_; }

  bool null() { return value() && dom_.null(); }
  bool boolean(bool v) { return value() && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return value() && dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return value() && dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return value() && dom_.number_float(v, s); }
  bool string(json::string_t& v) { return value() && dom_.string(v); }
  bool binary(json::binary_t& v) { return value() && dom_.binary(v); }
  bool start_object(size_t n) { return open() && dom_.start_object(n); }
  bool key(json::string_t& k) {
    last_key_ = k;
    return dom_.key(k);
  }
  bool end_object() { return close() && dom_.end_object(); }
  bool start_array(size_t n) { return open() && dom_.start_array(n); }
  bool end_array() { return close() && dom_.end_array(); }
  template <class Exception>
  bool parse_error(size_t position, const std::string& token, const Exception& e) {
    return dom_.parse_error(position, token, e);  // throws e
  }

 private:
  bool value() {
    if (++values_ > max_values_) throw TooMany{};
    return true;
  }
  bool open() {
    if (depth_ >= max_depth_) throw TooDeep{};
    ++depth_;
    return value();
  }
  bool close() {
    --depth_;
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::string last_key_;  // the field a failing value belongs to
  int depth_ = 0;
  const int max_depth_;
  size_t values_ = 0;
  const size_t max_values_;
};
}  // namespace

ApiResult<json> parse_client_json(std::string_view text, int max_depth, size_t max_values) {
  json result;
  BoundedDomBuilder builder(result, max_depth, max_values);
  const std::string& last_key = builder.last_key();
  try {
    json::sax_parse(text, &builder);
    return result;
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
