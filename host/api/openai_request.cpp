#include "api/openai_request.hpp"

#include "api/client_json.hpp"
#include "speculation/draft_limits.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

namespace tokenhost::api {

using nlohmann::json;

namespace {

using Err = std::optional<ApiError>;

std::string fmt(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

// "string \"abc\"", "number 2.5", "array", ... for "got ..." in messages; long values are cut.
std::string describe(const json& v) {
  auto shown = [&](const char* kind) {
    std::string d = dump_json(v);
    if (d.size() > 40) d = d.substr(0, 37) + "...";
    return std::string(kind) + " " + d;
  };
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return shown("boolean");
    case json::value_t::string: return shown("string");
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return shown("number");
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

ApiError wrong_type(const std::string& param, const std::string& expected, const json& v) {
  return invalid_request(param, "'" + param + "' must be " + expected + ", got " + describe(v));
}

ApiError out_of_range(const std::string& param, const std::string& range, double got) {
  return invalid_request(param, "'" + param + "' must be " + range + ", got " + fmt(got));
}

Err get_int(const json& v, const std::string& param, int64_t& out) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return wrong_type(param, "an integer that fits in 64 bits", v);
    out = int64_t(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    out = v.get<int64_t>();
  } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::abs(v.get<double>()) < 9e18) {
    out = int64_t(v.get<double>());  // 5.0 from a client that writes every number as a float
  } else {
    return wrong_type(param, "an integer", v);
  }
  return {};
}

Err get_int_in(const json& v, const std::string& param, int64_t lo, int64_t hi, int64_t& out) {
  if (auto e = get_int(v, param, out)) return e;
  if (out < lo || out > hi)
    return invalid_request(param, "'" + param + "' must be an integer from " + std::to_string(lo) + " to " +
                                      std::to_string(hi) + ", got " + std::to_string(out));
  return {};
}

Err get_number(const json& v, const std::string& param, double& out) {
  if (!v.is_number()) return wrong_type(param, "a number", v);
  out = v.get<double>();
  return {};
}

// lo/hi inclusive unless the matching *_open flag is set.
Err get_number_in(const json& v, const std::string& param, double lo, double hi, bool lo_open, bool hi_open,
                  double& out) {
  if (auto e = get_number(v, param, out)) return e;
  bool ok = (lo_open ? out > lo : out >= lo) && (hi_open ? out < hi : out <= hi);
  if (!ok) {
    std::string range = "in " + std::string(lo_open ? "(" : "[") + fmt(lo) + ", " + fmt(hi) + (hi_open ? ")" : "]");
    return out_of_range(param, range, out);
  }
  return {};
}

Err get_bool(const json& v, const std::string& param, bool& out) {
  if (!v.is_boolean()) return wrong_type(param, "a boolean", v);
  out = v.get<bool>();
  return {};
}

Err get_string(const json& v, const std::string& param, std::string& out) {
  if (!v.is_string()) return wrong_type(param, "a string", v);
  out = v.get<std::string>();
  return {};
}

// The `tokenhost` extension object: {"arm": "b"} asks for an arm of the model's running experiment,
// {"class": "batch"} names the request's class (which arms may be held back from), {"speculate":
// false} turns speculative decoding off for the request and {"max_draft": N} bounds its draft length.
Err parse_tokenhost(const json& v, OpenAIRequest& r) {
  if (!v.is_object()) return wrong_type("tokenhost", "an object", v);
  std::optional<bool> speculate;
  for (const auto& [k, x] : v.items()) {
    if (k == "arm") {
      if (auto e = get_string(x, "tokenhost.arm", r.arm)) return e;
      if (r.arm.empty()) return invalid_request("tokenhost.arm", "'tokenhost.arm' must name an arm, got an empty string");
    } else if (k == "class") {
      if (auto e = get_string(x, "tokenhost.class", r.request_class)) return e;
    } else if (k == "speculate") {
      bool on = true;
      if (auto e = get_bool(x, "tokenhost.speculate", on)) return e;
      speculate = on;
    } else if (k == "grammar") {
      auto c = parse_grammar(x);
      if (!c) return c.error();
      if (r.constraint)
        return invalid_request("tokenhost.grammar", "'response_format' and 'tokenhost.grammar' both constrain the output: give one");
      r.constraint = c.value();
    } else if (k == "max_draft") {
      int64_t n = 0;
      if (auto e = get_int_in(x, "tokenhost.max_draft", 0, kMaxDraftTokens, n)) return e;
      r.max_draft = uint32_t(n);
    } else {
      return invalid_request("tokenhost." + k, "unknown field 'tokenhost." + k +
                                                   "' (the tokenhost object takes 'arm', 'class', 'speculate', 'max_draft' and 'grammar')");
    }
  }
  if (speculate == false) {
    if (r.max_draft.value_or(0) > 0)
      return invalid_request("tokenhost.max_draft", "'tokenhost.max_draft' is " + std::to_string(*r.max_draft) +
                                                        " but 'tokenhost.speculate' is false: drop one of them");
    r.max_draft = 0;
  }
  r.tokenhost = v;
  return {};
}

Err get_token_ids(const json& v, const std::string& param, std::vector<int32_t>& out) {
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t id = 0;
    std::string p = param + "[" + std::to_string(i) + "]";
    if (!v[i].is_number_integer()) return wrong_type(p, "a token id (an integer)", v[i]);
    if (auto e = get_int_in(v[i], p, 0, std::numeric_limits<int32_t>::max(), id)) return e;
    out.push_back(int32_t(id));
  }
  return {};
}

Err parse_prompt(const json& v, const RequestLimits& limits, std::vector<Prompt>& out) {
  const std::string expected = "a string, an array of strings, an array of token ids or an array of token id arrays";
  if (v.is_string()) {
    out.push_back({v.get<std::string>(), {}, false});
    return {};
  }
  if (!v.is_array()) return wrong_type("prompt", expected, v);
  if (v.empty()) return invalid_request("prompt", "'prompt' must not be an empty array");
  if (v[0].is_number()) {  // one prompt as token ids
    Prompt p;
    p.is_tokens = true;
    if (auto e = get_token_ids(v, "prompt", p.tokens)) return e;
    out.push_back(std::move(p));
    return {};
  }
  if (v.size() > limits.max_prompts)
    return invalid_request("prompt", "'prompt' holds " + std::to_string(v.size()) + " prompts, at most " +
                                         std::to_string(limits.max_prompts) + " are allowed in one request");
  bool strings = v[0].is_string();
  for (size_t i = 0; i < v.size(); ++i) {
    std::string param = "prompt[" + std::to_string(i) + "]";
    if (strings) {
      if (!v[i].is_string()) return wrong_type(param, "a string like prompt[0]", v[i]);
      out.push_back({v[i].get<std::string>(), {}, false});
    } else {
      if (!v[i].is_array()) return wrong_type(param, i == 0 ? expected : "an array of token ids like prompt[0]", v[i]);
      if (v[i].empty()) return invalid_request(param, "'" + param + "' must not be an empty array");
      Prompt p;
      p.is_tokens = true;
      if (auto e = get_token_ids(v[i], param, p.tokens)) return e;
      out.push_back(std::move(p));
    }
  }
  return {};
}

// content: a string, or an array of {"type": "text", "text": ...} parts joined with "\n" (as vLLM
// does), or null/absent for an assistant message that carried only tool calls.
Err parse_content(const json& m, const std::string& param, const std::string& role, std::string& out) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    if (role == "assistant") return {};
    return invalid_request(param, "'" + param + "' is required for a " + role + " message");
  }
  if (it->is_string()) {
    out = it->get<std::string>();
    return {};
  }
  if (!it->is_array()) return wrong_type(param, "a string or an array of content parts", *it);
  for (size_t j = 0; j < it->size(); ++j) {
    const json& part = (*it)[j];
    std::string pp = param + "[" + std::to_string(j) + "]";
    if (!part.is_object()) return wrong_type(pp, "a content part object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      return invalid_request(pp + ".type", "'" + pp + ".type' is required and must be a string");
    if (*type != "text")
      return invalid_request(pp + ".type", "only text content parts are supported, got type '" +
                                               type->get<std::string>() + "'");
    auto text = part.find("text");
    if (text == part.end()) return invalid_request(pp + ".text", "'" + pp + ".text' is required");
    std::string t;
    if (auto e = get_string(*text, pp + ".text", t)) return e;
    if (j > 0) out += "\n";
    out += t;
  }
  return {};
}

Err parse_messages(const json& v, std::vector<ChatMessage>& out) {
  if (!v.is_array()) return wrong_type("messages", "an array of messages", v);
  if (v.empty()) return invalid_request("messages", "'messages' must hold at least one message");
  static const std::set<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
  for (size_t i = 0; i < v.size(); ++i) {
    std::string param = "messages[" + std::to_string(i) + "]";
    const json& m = v[i];
    if (!m.is_object()) return wrong_type(param, "a message object", m);
    ChatMessage msg;
    auto role = m.find("role");
    if (role == m.end() || role->is_null()) return invalid_request(param + ".role", "'" + param + ".role' is required");
    if (auto e = get_string(*role, param + ".role", msg.role)) return e;
    if (!roles.count(msg.role))
      return invalid_request(param + ".role", "'" + param +
                                                  ".role' must be one of system, developer, user, assistant, tool; got '" +
                                                  msg.role + "'");
    if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for the same thing
    if (auto e = parse_content(m, param + ".content", msg.role, msg.content)) return e;
    if (auto it = m.find("name"); it != m.end() && !it->is_null())
      if (auto e = get_string(*it, param + ".name", msg.name)) return e;
    if (auto it = m.find("tool_call_id"); it != m.end() && !it->is_null())
      if (auto e = get_string(*it, param + ".tool_call_id", msg.tool_call_id)) return e;
    if (auto it = m.find("tool_calls"); it != m.end() && !it->is_null()) {
      if (msg.role != "assistant") return invalid_request(param + ".tool_calls", "only an assistant message makes tool calls");
      if (!it->is_array()) return wrong_type(param + ".tool_calls", "an array of tool calls", *it);
      for (size_t k = 0; k < it->size(); ++k) {
        const std::string cp = param + ".tool_calls[" + std::to_string(k) + "]";
        const json& c = (*it)[k];
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
          return invalid_request(cp, "a tool call is {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
        ToolCall call;
        if (auto e = get_string(c["function"].value("name", json()), cp + ".function.name", call.name)) return e;
        if (auto e = get_string(c["function"].value("arguments", json("{}")), cp + ".function.arguments", call.arguments)) return e;
        if (c.contains("id") && c["id"].is_string()) call.id = c["id"].get<std::string>();
        msg.tool_calls.push_back(std::move(call));
      }
    }
    out.push_back(std::move(msg));
  }
  return {};
}

Err parse_stop(const json& v, const RequestLimits& limits, std::vector<std::string>& out) {
  if (v.is_string()) {
    if (v.get<std::string>().empty()) return invalid_request("stop", "'stop' must not be an empty string");
    out.push_back(v.get<std::string>());
    return {};
  }
  if (!v.is_array()) return wrong_type("stop", "a string or an array of strings", v);
  if (v.size() > limits.max_stop)
    return invalid_request("stop", "'stop' holds " + std::to_string(v.size()) + " strings, at most " +
                                       std::to_string(limits.max_stop) + " are allowed");
  for (size_t i = 0; i < v.size(); ++i) {
    std::string param = "stop[" + std::to_string(i) + "]";
    std::string s;
    if (auto e = get_string(v[i], param, s)) return e;
    if (s.empty()) return invalid_request(param, "'" + param + "' must not be an empty string");
    out.push_back(std::move(s));
  }
  return {};
}

Err parse_logit_bias(const json& v, std::map<int32_t, double>& out) {
  if (!v.is_object()) return wrong_type("logit_bias", "an object mapping token ids to biases", v);
  for (const auto& [key, bias] : v.items()) {
    std::string param = "logit_bias." + key;
    char* end = nullptr;
    long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id > std::numeric_limits<int32_t>::max())
      return invalid_request(param, "'logit_bias' keys must be token ids (non-negative integers), got '" + key + "'");
    double b = 0;
    if (auto e = get_number_in(bias, param, -100, 100, false, false, b)) return e;
    out[int32_t(id)] = b;
  }
  return {};
}

ApiError unsupported(const std::string& param, const std::string& what) {
  return invalid_request(param, what + " is not supported by this server", "unsupported_parameter");
}

// One top-level field. Returns false in `known` for fields this endpoint does not understand.
Err parse_field(Endpoint ep, const std::string& key, const json& v, const RequestLimits& limits, OpenAIRequest& r,
                bool& known, bool& stream_options_given, std::optional<int64_t>& max_completion_tokens) {
  known = true;
  const bool chat = ep == Endpoint::chat_completions;
  if (key == "model") return get_string(v, key, r.model);
  if (key == "max_tokens" || (chat && key == "max_completion_tokens")) {
    int64_t n = 0;
    if (auto e = get_int(v, key, n)) return e;
    // Completions may ask 0 with echo (the prompt scored, nothing generated): checked with echo below.
    if (n < (chat ? 1 : 0)) return invalid_request(key, "'" + key + "' must be at least " + (chat ? "1" : "0") + ", got " + std::to_string(n));
    if (limits.max_tokens_limit > 0 && n > limits.max_tokens_limit)
      return invalid_request(key, "'" + key + "' is " + std::to_string(n) + ", more than this model allows (" +
                                      std::to_string(limits.max_tokens_limit) + ")");
    (key == "max_tokens" ? r.max_tokens : max_completion_tokens) = n;
    return {};
  }
  if (key == "temperature") return get_number_in(v, key, 0, 2, false, false, r.temperature);
  if (key == "top_p") return get_number_in(v, key, 0, 1, true, false, r.top_p);
  if (key == "top_k") return get_int_in(v, key, 0, std::numeric_limits<int32_t>::max(), r.top_k);
  if (key == "min_p") return get_number_in(v, key, 0, 1, false, true, r.min_p);
  if (key == "repetition_penalty") {
    if (auto e = get_number(v, key, r.repetition_penalty)) return e;
    if (!(r.repetition_penalty > 0)) return out_of_range(key, "greater than 0", r.repetition_penalty);
    return {};
  }
  if (key == "frequency_penalty") return get_number_in(v, key, -2, 2, false, false, r.frequency_penalty);
  if (key == "presence_penalty") return get_number_in(v, key, -2, 2, false, false, r.presence_penalty);
  if (key == "seed") {
    int64_t s = 0;
    if (auto e = get_int(v, key, s)) return e;
    r.seed = s;
    return {};
  }
  if (key == "n") return get_int_in(v, key, 1, int64_t(limits.max_n), r.n);
  if (key == "stop") return parse_stop(v, limits, r.stop);
  if (key == "stream") return get_bool(v, key, r.stream);
  if (key == "stream_options") {
    if (!v.is_object()) return wrong_type(key, "an object", v);
    stream_options_given = true;
    if (auto it = v.find("include_usage"); it != v.end() && !it->is_null())
      return get_bool(*it, "stream_options.include_usage", r.include_usage);
    return {};
  }
  if (key == "logprobs") {
    if (chat) return get_bool(v, key, r.logprobs);
    r.logprobs = true;
    return get_int_in(v, key, 0, limits.max_top_logprobs, r.top_logprobs);
  }
  if (chat && key == "top_logprobs") return get_int_in(v, key, 0, limits.max_top_logprobs, r.top_logprobs);
  if (!chat && key == "echo") return get_bool(v, key, r.echo);
  if (key == "logit_bias") return parse_logit_bias(v, r.logit_bias);
  if (key == "user") return get_string(v, key, r.user);
  if (key == "cache_salt") {
    if (auto e = get_string(v, key, r.cache_salt)) return e;
    if (r.cache_salt.empty() || r.cache_salt.size() > kMaxCacheSaltChars)
      return invalid_request(key, "'cache_salt' must be 1 to " + std::to_string(kMaxCacheSaltChars) + " characters, got " +
                                      std::to_string(r.cache_salt.size()));
    return {};
  }
  if (key == "priority") return get_int(v, key, r.priority);
  if (key == "tokenhost") return parse_tokenhost(v, r);
  if (!chat && key == "prompt") return parse_prompt(v, limits, r.prompts);
  if (chat && key == "messages") return parse_messages(v, r.messages);
  // Fields that change what the client gets back: ignoring them would give a wrong answer silently.
  if (!chat && key == "suffix") {
    if (v.is_string() && v.get<std::string>().empty()) return {};
    return unsupported(key, "'suffix' (insertion)");
  }
  if (chat && key == "tools") {
    auto t = parse_tools(nlohmann::ordered_json::parse(v.dump()));  // the gateway reads them again in the client's order
    if (!t) return t.error();
    r.tools.tools = std::move(t.value());
    return {};
  }
  if (chat && key == "tool_choice") {
    r.tool_choice = v;  // resolved once 'tools' is read
    return {};
  }
  if (chat && key == "parallel_tool_calls") return get_bool(v, key, r.tools.parallel_tool_calls);
  if (key == "response_format") {
    // Checked here with the members in nlohmann::json's (sorted) order; the gateway compiles the
    // schema again from the body as written (parse_response_format), whose order the output follows.
    auto c = parse_response_format(nlohmann::ordered_json::parse(v.dump()));
    if (!c) return c.error();
    if (c.value() && r.constraint)
      return invalid_request(key, "'response_format' and 'tokenhost.grammar' both constrain the output: give one");
    if (c.value()) r.constraint = c.value();
    return {};
  }
  known = false;
  return {};
}

}  // namespace

ApiResult<OpenAIRequest> parse_request(Endpoint endpoint, const json& body, const RequestLimits& limits) {
  if (!body.is_object())
    return invalid_request("", "the request body must be a JSON object, got " + describe(body));
  OpenAIRequest r;
  r.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::chat_completions;
  bool stream_options_given = false;
  std::optional<int64_t> max_completion_tokens;
  for (const auto& [key, value] : body.items()) {
    if (value.is_null()) continue;
    bool known = true;
    if (auto e = parse_field(endpoint, key, value, limits, r, known, stream_options_given, max_completion_tokens))
      return *e;
    if (!known) r.ignored_fields.push_back(key);
  }

  if (!chat && r.prompts.empty()) return invalid_request("prompt", "'prompt' is required");
  if (chat && r.messages.empty()) return invalid_request("messages", "'messages' is required");
  // Each prompt runs n sequences: one request may not fill the KV cache alone.
  const size_t sequences = (chat ? 1 : r.prompts.size()) * size_t(r.n);
  if (sequences > limits.max_sequences)
    return invalid_request("n", "this request asks for " + std::to_string(chat ? 1 : r.prompts.size()) + " prompt(s) x n = " +
                                    std::to_string(r.n) + ", " + std::to_string(sequences) + " sequences; at most " +
                                    std::to_string(limits.max_sequences) + " are allowed in one request");
  if (max_completion_tokens) {
    if (r.max_tokens && *r.max_tokens != *max_completion_tokens)
      return invalid_request("max_completion_tokens", "'max_tokens' (" + std::to_string(*r.max_tokens) +
                                                          ") and 'max_completion_tokens' (" +
                                                          std::to_string(*max_completion_tokens) +
                                                          ") disagree; give one of them");
    r.max_tokens = max_completion_tokens;
  }
  if (!r.tool_choice.is_null()) {
    auto t = parse_tool_choice(r.tool_choice, r.tools);
    if (!t) return t.error();
    r.tools = std::move(t.value());
  }
  if (r.tools.active() && r.tools.choice != ToolChoice::automatic && r.constraint)
    return invalid_request("tool_choice", "'tool_choice' requires a call and 'response_format' constrains the answer: give one");
  if (stream_options_given && !r.stream)
    return invalid_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
  if (chat && r.top_logprobs > 0 && !r.logprobs)
    return invalid_request("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
  if (r.max_tokens && *r.max_tokens == 0 && !r.echo)
    return invalid_request("max_tokens", "'max_tokens' is 0: that generates nothing; it is allowed with 'echo' (to score the prompt)");
  // Echo with logprobs: the prompt's log-probabilities come with the answer whole, not as a stream.
  if (r.echo && r.logprobs && r.stream)
    return unsupported("echo", "'echo' with 'logprobs' in a stream (ask without 'stream' for the prompt's log-probabilities)");
  return r;
}

ApiResult<OpenAIRequest> parse_request(Endpoint endpoint, std::string_view body, const RequestLimits& limits) {
  auto parsed = parse_client_json(body);
  if (!parsed) return parsed.error();
  return parse_request(endpoint, parsed.value(), limits);
}

ApiResult<int64_t> check_context(int64_t prompt_tokens, std::optional<int64_t> max_tokens, int64_t context_length,
                                 const std::string& param, int64_t default_max_tokens) {
  const std::string code = "context_length_exceeded";
  if (prompt_tokens >= context_length)
    return invalid_request(param, "prompt has " + std::to_string(prompt_tokens) + " tokens, model context is " +
                                      std::to_string(context_length) + " (no room left to generate)",
                           code);
  if (max_tokens && prompt_tokens + *max_tokens > context_length)
    return invalid_request("max_tokens", "prompt has " + std::to_string(prompt_tokens) + " tokens and max_tokens is " +
                                             std::to_string(*max_tokens) + ", together more than the model context of " +
                                             std::to_string(context_length),
                           code);
  if (max_tokens) return *max_tokens;
  const int64_t left = context_length - prompt_tokens;
  return default_max_tokens > 0 ? std::min(left, default_max_tokens) : left;
}

SamplingParams sampling_params(const OpenAIRequest& r, uint64_t fallback_seed) {
  SamplingParams p;
  p.temperature = float(r.temperature);
  p.top_k = int32_t(r.top_k);
  p.top_p = float(r.top_p);
  p.min_p = float(r.min_p);
  p.repetition_penalty = float(r.repetition_penalty);
  p.frequency_penalty = float(r.frequency_penalty);
  p.presence_penalty = float(r.presence_penalty);
  p.seed = r.seed ? uint64_t(*r.seed) : fallback_seed;
  for (const auto& [token, bias] : r.logit_bias) p.logit_bias.emplace_back(token, float(bias));
  p.top_logprobs = r.logprobs ? uint32_t(r.top_logprobs) : 0;
  return p;
}

}  // namespace tokenhost::api
