#include "cluster/wire.hpp"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace tokenhost::cluster {
namespace {

using json = nlohmann::json;

std::string pack(const json& j) {
  auto bytes = json::to_msgpack(j);
  return std::string(bytes.begin(), bytes.end());
}

// A decoded message's fields, each read with its type and bound checked; errors name the message
// and the field ("generate.request.prompt[3]: not an integer").
class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) fail("", "not a map");
  }
  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw WireError(where_ + (field.empty() ? "" : "." + field) + ": " + why);
  }
  const json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  const json& need(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) fail(key, "missing");
    return *v;
  }
  std::string str(const char* key, bool required = true, size_t max = kMaxWireString) const {
    const json* v = required ? &need(key) : find(key);
    if (v == nullptr) return "";
    if (v->is_binary()) {
      const auto& b = v->get_binary();
      if (b.size() > max) fail(key, "longer than " + std::to_string(max) + " bytes");
      return std::string(b.begin(), b.end());
    }
    if (!v->is_string()) fail(key, "not a string");
    const auto& s = v->get_ref<const std::string&>();
    if (s.size() > max) fail(key, "longer than " + std::to_string(max) + " bytes");
    return s;
  }
  uint64_t u64(const char* key, bool required = true, uint64_t max = std::numeric_limits<uint64_t>::max()) const {
    const json* v = required ? &need(key) : find(key);
    return v == nullptr ? 0 : u64_of(*v, key, max);
  }
  // A value of this map read as u64 would read it (a map's values keyed by any string).
  uint64_t u64_of(const json& v, const std::string& field, uint64_t max = std::numeric_limits<uint64_t>::max()) const {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) fail(field, "not an unsigned integer");
    const uint64_t x = v.get<uint64_t>();
    if (x > max) fail(field, "above " + std::to_string(max));
    return x;
  }
  int64_t i64(const char* key, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    if (v == nullptr) return 0;
    if (!v->is_number_integer()) fail(key, "not an integer");
    int64_t x = v->is_number_unsigned() ? (v->get<uint64_t>() > uint64_t(hi) ? hi + 1 : int64_t(v->get<uint64_t>())) : v->get<int64_t>();
    if (x < lo || x > hi) fail(key, "outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }
  double real(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return 0;
    if (!v->is_number()) fail(key, "not a number");
    double x = v->get<double>();
    if (!std::isfinite(x)) fail(key, "not finite");
    return x;
  }
  std::optional<double> maybe_real(const char* key) const {
    if (find(key) == nullptr) return std::nullopt;
    return real(key);
  }
  bool flag(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return false;
    if (!v->is_boolean()) fail(key, "not a boolean");
    return v->get<bool>();
  }
  const json& array(const char* key, size_t max, bool required = true) const {
    static const json empty = json::array();
    const json* v = required ? &need(key) : find(key);
    if (v == nullptr) return empty;
    if (!v->is_array()) fail(key, "not an array");
    if (v->size() > max) fail(key, "more than " + std::to_string(max) + " entries");
    return *v;
  }
  std::vector<int32_t> tokens(const char* key, bool required = true) const {
    const json& a = array(key, kMaxWireTokens, required);
    std::vector<int32_t> out;
    out.reserve(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const json& t = a[i];
      if (!t.is_number_integer()) fail(std::string(key) + "[" + std::to_string(i) + "]", "not an integer");
      int64_t x = t.is_number_unsigned() ? int64_t(std::min<uint64_t>(t.get<uint64_t>(), uint64_t(INT32_MAX) + 1)) : t.get<int64_t>();
      if (x < 0 || x > INT32_MAX) fail(std::string(key) + "[" + std::to_string(i) + "]", "not a token id");
      out.push_back(int32_t(x));
    }
    return out;
  }
  Fields sub(const char* key) const { return Fields(need(key), where_ + "." + key); }
  const std::string& where() const { return where_; }

 private:
  const json& j_;
  std::string where_;
};

json parse(std::string_view bytes, const char* message) {
  if (bytes.size() > kMaxWireBytes) throw WireError(std::string(message) + ": larger than " + std::to_string(kMaxWireBytes) + " bytes");
  try {
    return json::from_msgpack(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    throw WireError(std::string(message) + ": not MessagePack: " + e.what());
  }
}

json binary(const std::string& s) { return json::binary(std::vector<uint8_t>(s.begin(), s.end())); }

json hello_json(const Hello& m) {
  return json{{"v", m.version}, {"node", m.node}, {"cert", m.certificate}, {"nonce", binary(m.nonce)},
              {"sig", binary(m.signature)}, {"role", m.role}};
}
Hello hello_of(const Fields& f) {
  Hello m;
  m.version = uint32_t(f.u64("v", true, std::numeric_limits<uint32_t>::max()));
  if (m.version != kWireVersion)
    f.fail("v", "protocol version " + std::to_string(m.version) + ", this node speaks " + std::to_string(kWireVersion));
  m.node = f.str("node");
  m.certificate = f.str("cert", true, 64 << 10);
  m.nonce = f.str("nonce", true, 256);
  m.signature = f.str("sig", true, 1024);
  m.role = f.str("role");
  if (m.role != "head" && m.role != "worker") f.fail("role", "\"" + m.role + "\" is neither head nor worker");
  return m;
}

json engine_json(const EngineInfo& e) {
  json j{{"name", e.name}, {"model", e.model}, {"device", e.device}, {"kv", e.kv_positions},
         {"prefix", e.prefix_cache}, {"window", e.window_cap}, {"capacity", e.capacity}, {"plugins", e.plugins},
         {"serving", e.serving}, {"down", e.down_reason}, {"role", e.role}};
  if (e.prefix_block > 0) {
    j["pblock"] = e.prefix_block;
    j["pversion"] = e.prefix_version;
  }
  if (e.has_prefix_keys) {
    // 8 bytes per key, little-endian: a byte string, not an array of integers (STACK.md: CAF moves
    // byte strings several times faster).
    std::vector<uint8_t> bytes(e.prefix_keys.size() * 8);
    for (size_t i = 0; i < e.prefix_keys.size(); ++i)
      for (int b = 0; b < 8; ++b) bytes[i * 8 + b] = uint8_t(e.prefix_keys[i] >> (8 * b));
    j["pkeys"] = json::binary(std::move(bytes));
  }
  return j;
}
std::vector<EngineInfo> engines_of(const Fields& f, const char* key) {
  const json& a = f.array(key, kMaxWireEngines);
  std::vector<EngineInfo> out;
  for (size_t i = 0; i < a.size(); ++i) {
    Fields e(a[i], f.where() + "." + key + "[" + std::to_string(i) + "]");
    EngineInfo info;
    info.name = e.str("name", true, 256);
    info.model = e.str("model", true, 256);
    info.device = e.str("device", true, 256);
    info.kv_positions = e.u64("kv");
    info.prefix_cache = e.flag("prefix");
    info.window_cap = uint32_t(e.u64("window", false, std::numeric_limits<uint32_t>::max()));
    if (const uint64_t capacity = e.u64("capacity", false, 65536); capacity > 0) info.capacity = uint32_t(capacity);
    if (e.find("role") != nullptr) info.role = e.str("role", true, 16);  // a node that sent none: "both"
    if (info.role != "both" && info.role != "prefill" && info.role != "decode")
      e.fail("role", "\"" + info.role + "\" is not both, prefill or decode");
    info.serving = e.flag("serving");
    info.prefix_block = uint32_t(e.u64("pblock", false, 1u << 20));
    info.prefix_version = e.u64("pversion", false);
    if (e.find("pkeys") != nullptr) {
      const std::string bytes = e.str("pkeys", true, kMaxWirePrefixKeys * 8);
      if (bytes.size() % 8 != 0) e.fail("pkeys", "not a whole number of 8-byte keys");
      if (info.prefix_block == 0) e.fail("pkeys", "keys without a block size (pblock)");
      info.has_prefix_keys = true;
      info.prefix_keys.resize(bytes.size() / 8);
      for (size_t i = 0; i < info.prefix_keys.size(); ++i)
        for (int b = 0; b < 8; ++b) info.prefix_keys[i] |= uint64_t(uint8_t(bytes[i * 8 + b])) << (8 * b);
    }
    info.down_reason = e.str("down", false);
    const json& plugins = e.need("plugins");
    if (!plugins.is_object() || plugins.size() > 64) e.fail("plugins", "not a map of at most 64 slots");
    for (const auto& [slot, id] : plugins.items()) {
      if (!id.is_string() || slot.size() > 64 || id.get_ref<const std::string&>().size() > 256)
        e.fail("plugins." + slot.substr(0, 64), "not a plugin id");
      info.plugins[slot] = id.get<std::string>();
    }
    if (info.name.empty()) e.fail("name", "empty");
    out.push_back(std::move(info));
  }
  return out;
}

json token_json(const SampledToken& t) {
  json top = json::array();
  for (const auto& x : t.top) top.push_back(json::array({x.token, x.logprob}));
  return json::array({t.token, t.logprob, t.entropy, std::move(top)});
}
SampledToken token_of(const json& j, const Fields& f, const std::string& field) {
  if (!j.is_array() || j.size() != 4) f.fail(field, "not [token, logprob, entropy, top]");
  SampledToken t;
  if (!j[0].is_number_integer() || j[0].get<int64_t>() < 0 || j[0].get<int64_t>() > INT32_MAX) f.fail(field, "not a token id");
  t.token = int32_t(j[0].get<int64_t>());
  if (!j[1].is_number() || !j[2].is_number()) f.fail(field, "logprob or entropy not a number");
  t.logprob = j[1].get<float>();
  t.entropy = j[2].get<float>();
  if (std::isnan(t.logprob) || t.logprob > 0 || std::isnan(t.entropy) || t.entropy < 0)
    f.fail(field, "logprob above 0 or entropy below 0");
  if (!j[3].is_array() || j[3].size() > kMaxWireTopLogprobs) f.fail(field, "top not an array of at most 64");
  for (const json& x : j[3]) {
    if (!x.is_array() || x.size() != 2 || !x[0].is_number_integer() || !x[1].is_number() || x[0].get<int64_t>() < 0 ||
        x[0].get<int64_t>() > INT32_MAX)
      f.fail(field, "top entry not [token, logprob]");
    t.top.push_back({int32_t(x[0].get<int64_t>()), x[1].get<float>()});
  }
  return t;
}

json sampling_json(const SamplingParams& s) {
  json bias = json::array();
  for (const auto& [tok, b] : s.logit_bias) bias.push_back(json::array({tok, b}));
  return json{{"temperature", s.temperature}, {"top_k", s.top_k}, {"top_p", s.top_p}, {"min_p", s.min_p},
              {"rep", s.repetition_penalty}, {"freq", s.frequency_penalty}, {"pres", s.presence_penalty},
              {"last_n", s.penalty_last_n}, {"seed", s.seed}, {"top_logprobs", s.top_logprobs}, {"bias", std::move(bias)}};
}
SamplingParams sampling_of(const Fields& f) {
  SamplingParams s;
  s.temperature = float(f.real("temperature"));
  s.top_k = int32_t(f.i64("top_k", 0, INT32_MAX));
  s.top_p = float(f.real("top_p"));
  s.min_p = float(f.real("min_p"));
  s.repetition_penalty = float(f.real("rep"));
  s.frequency_penalty = float(f.real("freq"));
  s.presence_penalty = float(f.real("pres"));
  s.penalty_last_n = int32_t(f.i64("last_n", -1, INT32_MAX));
  s.seed = f.u64("seed");
  s.top_logprobs = uint32_t(f.u64("top_logprobs", true, kMaxWireTopLogprobs));
  const json& bias = f.array("bias", 1 << 16);
  for (size_t i = 0; i < bias.size(); ++i) {
    const json& b = bias[i];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number() || b[0].get<int64_t>() < 0 ||
        b[0].get<int64_t>() > INT32_MAX || !std::isfinite(b[1].get<double>()))
      f.fail("bias[" + std::to_string(i) + "]", "not [token, bias]");
    s.logit_bias.emplace_back(int32_t(b[0].get<int64_t>()), b[1].get<float>());
  }
  return s;
}

json result_json(const GenerateResult& r) {
  json j{{"tokens", r.tokens}, {"finish", r.finish_reason}, {"engine", r.engine}, {"error", r.error},
         {"model", r.model}, {"cached", r.cached}, {"cost", r.cost}};
  if (!r.logprobs.empty()) {
    json lp = json::array();
    for (const auto& t : r.logprobs) lp.push_back(token_json(t));
    j["logprobs"] = std::move(lp);
  }
  if (!r.prompt_logprobs.empty()) {
    json lp = json::array();
    for (const auto& t : r.prompt_logprobs) lp.push_back(token_json(t));
    j["prompt_logprobs"] = std::move(lp);
  }
  if (r.ttft_s) j["ttft"] = *r.ttft_s;
  if (r.itl_s) j["itl"] = *r.itl_s;
  if (r.e2e_s) j["e2e"] = *r.e2e_s;
  if (r.refused_status != 0) {
    j["refused"] = r.refused_status;
    j["retry_after"] = r.retry_after_s;
  }
  return j;
}

}  // namespace

std::string encode(const Hello& m) { return pack(hello_json(m)); }

std::string encode(const Welcome& m) {
  json engines = json::array();
  for (const auto& e : m.engines) engines.push_back(engine_json(e));
  return pack(json{{"hello", hello_json(m.hello)}, {"engines", std::move(engines)}});
}

std::string encode(const std::vector<EngineInfo>& m) {
  json engines = json::array();
  for (const auto& e : m) engines.push_back(engine_json(e));
  return pack(json{{"engines", std::move(engines)}});
}

std::string encode(const RemoteGenerate& m) {
  const GenerateRequest& r = m.request;
  json j{{"engine", m.engine},
                   {"id", r.id},
                   {"request_id", r.request_id},
                   {"prompt", r.prompt},
                   {"prompt_text", r.prompt_text},
                   {"max_tokens", r.max_tokens},
                   {"priority", r.priority},
                   {"session", r.session_key},
                   {"user", r.user},
                   {"api_key", r.api_key},
                   {"arm", r.arm},
                   {"class", r.request_class},
                   {"client", r.client},
                   {"model", r.model},
                   {"sampling", sampling_json(r.sampling)},
                   {"seeded", r.seeded},
                   {"logprobs", r.logprobs},
                   {"prompt_logprobs", r.prompt_logprobs},
                   {"ignore_eos", r.ignore_eos},
                   {"max_draft", r.max_draft},
                   {"cache_salt", r.cache_salt},
                   {"handoff", r.kv_handoff}};
  if (r.constraint) j["structured_output"] = json{{"type", r.constraint->type}, {"text", r.constraint->text}, {"gbnf", r.constraint->gbnf}};
  return pack(j);
}

std::string encode(const TokenBatch& m) {
  json tokens = json::array();
  for (const auto& t : m.tokens) tokens.push_back(token_json(t));
  return pack(json{{"seq", m.seq}, {"first", m.first}, {"tokens", std::move(tokens)}});
}

std::string encode(const GenerateResult& m) { return pack(result_json(m)); }

std::string encode(const SlotChange& m) {
  return pack(json{{"engine", m.engine}, {"slot", m.slot}, {"plugin", m.plugin}, {"config", m.config_toml}});
}

std::string encode(const AdminReply& m) { return pack(json{{"ok", m.ok}, {"status", m.status}, {"message", m.message}}); }

Hello decode_hello(std::string_view bytes) {
  json j = parse(bytes, "hello");
  return hello_of(Fields(j, "hello"));
}

Welcome decode_welcome(std::string_view bytes) {
  json j = parse(bytes, "welcome");
  Fields f(j, "welcome");
  Welcome w;
  w.hello = hello_of(f.sub("hello"));
  w.engines = engines_of(f, "engines");
  return w;
}

std::string encode(const PrefixVersions& m) { return pack(json{{"versions", m.versions}}); }

PrefixVersions decode_prefix_versions(std::string_view bytes) {
  json j = parse(bytes, "prefix_versions");
  Fields f(j, "prefix_versions");
  const json& v = f.need("versions");
  if (!v.is_object()) f.fail("versions", "not a map");
  if (v.size() > kMaxWireEngines) f.fail("versions", "more than " + std::to_string(kMaxWireEngines) + " engines");
  const Fields versions = f.sub("versions");
  PrefixVersions m;
  for (const auto& [name, version] : v.items()) {
    if (name.size() > 256) f.fail("versions", "an engine name longer than 256 bytes");
    m.versions[name] = versions.u64_of(version, name);
  }
  return m;
}

std::vector<EngineInfo> decode_engines(std::string_view bytes) {
  json j = parse(bytes, "engines");
  return engines_of(Fields(j, "engines"), "engines");
}

RemoteGenerate decode_generate(std::string_view bytes) {
  json j = parse(bytes, "generate");
  Fields f(j, "generate");
  RemoteGenerate m;
  m.engine = f.str("engine", true, 256);
  GenerateRequest& r = m.request;
  r.id = f.u64("id");
  r.request_id = f.str("request_id", false);
  r.prompt = f.tokens("prompt");
  if (r.prompt.empty()) f.fail("prompt", "empty");
  r.prompt_text = f.str("prompt_text", false);
  r.max_tokens = uint32_t(f.u64("max_tokens", true, kMaxWireTokens));
  r.priority = int32_t(f.i64("priority", INT32_MIN, INT32_MAX));
  r.session_key = f.str("session", false);
  r.user = f.str("user", false);
  r.api_key = f.str("api_key", false);
  r.arm = f.str("arm", false);
  r.request_class = f.str("class", false);
  r.client = f.str("client", false);
  r.model = f.str("model", false);
  r.sampling = sampling_of(f.sub("sampling"));
  r.seeded = f.flag("seeded");
  r.logprobs = f.flag("logprobs");
  r.prompt_logprobs = f.flag("prompt_logprobs");
  r.ignore_eos = f.flag("ignore_eos");
  r.max_draft = uint32_t(f.u64("max_draft", true, kMaxDraftTokens));
  r.cache_salt = f.str("cache_salt", false);
  r.kv_handoff = f.flag("handoff");
  if (f.find("structured_output") != nullptr) {  // a head before 1.11 sends none
    Fields c = f.sub("structured_output");
    auto source = std::make_shared<ConstraintSource>();
    source->type = c.str("type");
    source->text = c.str("text", false);
    source->gbnf = c.str("gbnf");
    r.constraint = std::move(source);
  }
  return m;
}

TokenBatch decode_tokens(std::string_view bytes) {
  json j = parse(bytes, "tokens");
  Fields f(j, "tokens");
  TokenBatch b;
  b.seq = f.u64("seq");
  b.first = f.u64("first", true, kMaxWireTokens);
  const json& a = f.array("tokens", kMaxWireTokens);
  for (size_t i = 0; i < a.size(); ++i) b.tokens.push_back(token_of(a[i], f, "tokens[" + std::to_string(i) + "]"));
  return b;
}

GenerateResult decode_result(std::string_view bytes) {
  json j = parse(bytes, "result");
  Fields f(j, "result");
  GenerateResult r;
  r.tokens = f.tokens("tokens");
  r.finish_reason = f.str("finish", true, 64);
  static const char* const reasons[] = {"length", "stop", "cancelled", "error", GenerateResult::kRerouted};
  bool known = false;
  for (const char* k : reasons) known = known || r.finish_reason == k;
  if (!known) f.fail("finish", "unknown finish reason \"" + r.finish_reason + "\"");
  r.engine = f.str("engine", false, 256);
  r.error = f.str("error", false);
  r.model = f.str("model", false, 256);
  r.cached = f.flag("cached");
  r.cost = f.real("cost");
  const json& lp = f.array("logprobs", kMaxWireTokens, false);
  for (size_t i = 0; i < lp.size(); ++i) r.logprobs.push_back(token_of(lp[i], f, "logprobs[" + std::to_string(i) + "]"));
  const json& plp = f.array("prompt_logprobs", kMaxWireTokens, false);
  for (size_t i = 0; i < plp.size(); ++i)
    r.prompt_logprobs.push_back(token_of(plp[i], f, "prompt_logprobs[" + std::to_string(i) + "]"));
  r.ttft_s = f.maybe_real("ttft");
  r.itl_s = f.maybe_real("itl");
  r.e2e_s = f.maybe_real("e2e");
  r.refused_status = uint32_t(f.u64("refused", false, 599));
  if (r.refused_status != 0 && (r.refused_status < 400 || r.finish_reason != "error")) f.fail("refused", "not a refusal's status");
  r.retry_after_s = uint32_t(f.u64("retry_after", false, 86400));
  return r;
}

SlotChange decode_slot_change(std::string_view bytes) {
  json j = parse(bytes, "slot_change");
  Fields f(j, "slot_change");
  SlotChange m;
  m.engine = f.str("engine", true, 256);
  m.slot = f.str("slot", true, 64);
  m.plugin = f.str("plugin", false, 256);
  m.config_toml = f.str("config", false);
  return m;
}

AdminReply decode_admin_reply(std::string_view bytes) {
  json j = parse(bytes, "admin_reply");
  Fields f(j, "admin_reply");
  AdminReply m;
  m.ok = f.flag("ok");
  m.status = uint32_t(f.u64("status", true, 599));
  if (!m.ok && m.status < 400) f.fail("status", "a refusal's status below 400");
  m.message = f.str("message", false);
  return m;
}

}  // namespace tokenhost::cluster
