#include "http/http_message.hpp"

#include <strings.h>

namespace tokenhost {

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k.size() == name.size() && ::strncasecmp(k.data(), name.data(), name.size()) == 0) return v;
  return {};
}

std::string HttpRequest::param(const std::string& key) const {
  auto it = query.find(key);
  return it == query.end() ? std::string() : it->second;
}

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string percent_decode(std::string_view text, bool form) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 &&
        hex_value(text[i + 2]) >= 0) {
      out += char(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
      i += 2;
    } else if (c == '+' && form) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::map<std::string, std::string> parse_query(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    out[percent_decode(pair.substr(0, eq), true)] =
        eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true);
  }
  return out;
}

}  // namespace tokenhost
