// Structured output's parsers on outside input: a GBNF grammar (tokenhost.grammar), a JSON Schema
// (response_format, a tool's parameters) compiled to GBNF, which must then parse, a matcher fed bytes
// of the input, and a model's answer read back into tool calls in both formats. Refusals are
// exceptions of the documented types; nothing crashes, and no grammar the schema compiler writes is
// refused by the parser.
#include <tokenhost/gbnf.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "api/tools.hpp"
#include "constraint/json_schema.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace sdk = tokenhost::sdk;
  const std::string in(reinterpret_cast<const char*>(data), size);
  // First byte: which parser; the rest its input (a grammar's text is followed, after a NUL, by the
  // bytes its matcher is fed).
  const uint8_t mode = in.empty() ? 0 : uint8_t(in[0]) % 3;
  const std::string body = in.empty() ? std::string() : in.substr(1);
  if (mode == 0) {
    const size_t cut = body.find('\0');
    try {
      auto g = std::make_shared<const sdk::Grammar>(sdk::parse_gbnf(body.substr(0, cut)));
      sdk::GrammarMatcher m(g);
      if (cut != std::string::npos)
        for (size_t i = cut + 1; i < body.size(); ++i) (void)m.accept_byte(uint8_t(body[i]));
      (void)m.complete();
      (void)m.state_key();
    } catch (const std::invalid_argument&) {
    }
  } else if (mode == 1) {
    const auto schema = nlohmann::ordered_json::parse(body, nullptr, false);
    if (schema.is_discarded()) return 0;
    std::string gbnf;
    try {
      gbnf = tokenhost::constraint::json_schema_to_gbnf(schema);
    } catch (const tokenhost::constraint::SchemaError&) {
      return 0;
    }
    try {
      sdk::parse_gbnf(gbnf);
    } catch (const std::invalid_argument& e) {
      std::abort();  // the compiler wrote a grammar the parser refuses
    }
  } else {
    std::mt19937_64 rng(1);
    (void)tokenhost::api::parse_tool_answer(body, tokenhost::api::ToolFormat::hermes, rng);
    (void)tokenhost::api::parse_tool_answer(body, tokenhost::api::ToolFormat::llama31, rng);
  }
  return 0;
}
