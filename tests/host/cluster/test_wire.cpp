// The cluster's messages (cluster/wire.hpp): every field survives encode and decode on fresh random
// values, and a peer's bytes that do not follow the format are refused by name, never taken.
#include <catch2/catch.hpp>

#include <random>

#include <nlohmann/json.hpp>

#include "cluster/wire.hpp"
#include "harness.hpp"

namespace cluster_wire_tests {

using namespace tokenhost;
using namespace tokenhost::cluster;

namespace {

std::string random_text(std::mt19937_64& rng, size_t max) {
  std::string s(rng() % (max + 1), ' ');
  for (auto& c : s) c = char(rng() % 256);  // any bytes, NUL included
  return s;
}

SampledToken random_token(std::mt19937_64& rng) {
  SampledToken t;
  t.token = int32_t(rng() % 32000);
  t.logprob = -float(rng() % 10000) / 100.0f;
  t.entropy = float(rng() % 1000) / 100.0f;
  for (size_t i = rng() % 4; i > 0; --i) t.top.push_back({int32_t(rng() % 32000), -float(rng() % 1000) / 10.0f});
  return t;
}

bool same(const SampledToken& a, const SampledToken& b) {
  if (a.token != b.token || a.logprob != b.logprob || a.entropy != b.entropy || a.top.size() != b.top.size()) return false;
  for (size_t i = 0; i < a.top.size(); ++i)
    if (a.top[i].token != b.top[i].token || a.top[i].logprob != b.top[i].logprob) return false;
  return true;
}

std::string msgpack(const nlohmann::json& j) {
  auto b = nlohmann::json::to_msgpack(j);
  return std::string(b.begin(), b.end());
}

}  // namespace

TEST_CASE("cluster wire: a sequence's request, tokens and result survive the round trip", "[cluster][wire]") {
  auto rng = testing::fresh_rng("cluster wire round trip");
  for (int round = 0; round < 50; ++round) {
    RemoteGenerate g;
    g.engine = "main";
    GenerateRequest& r = g.request;
    r.id = rng();
    r.request_id = random_text(rng, 40);
    for (size_t i = 1 + rng() % 300; i > 0; --i) r.prompt.push_back(int32_t(rng() % 32000));
    r.prompt_text = random_text(rng, 200);
    r.max_tokens = uint32_t(rng() % 4096);
    r.priority = int32_t(rng() % 200) - 100;
    r.session_key = random_text(rng, 20);
    r.user = random_text(rng, 20);
    r.api_key = random_text(rng, 20);
    r.arm = "b";
    r.request_class = "batch";
    r.client = "key:abc";
    r.model = "stories";
    r.sampling.temperature = float(rng() % 200) / 100.0f;
    r.sampling.top_k = int32_t(rng() % 50);
    r.sampling.top_p = 0.9f;
    r.sampling.seed = rng();
    r.sampling.top_logprobs = uint32_t(rng() % 5);
    r.sampling.penalty_last_n = -1;
    r.sampling.logit_bias = {{int32_t(rng() % 100), -1.5f}};
    r.seeded = rng() % 2;
    r.logprobs = rng() % 2;
    r.ignore_eos = rng() % 2;
    r.max_draft = uint32_t(rng() % 8);
    r.cache_salt = random_text(rng, 16);
    r.kv_handoff = rng() % 2;
    RemoteGenerate back = decode_generate(encode(g));
    const GenerateRequest& b = back.request;
    CHECK(back.engine == g.engine);
    CHECK(b.id == r.id);
    CHECK(b.request_id == r.request_id);
    CHECK(b.prompt == r.prompt);
    CHECK(b.prompt_text == r.prompt_text);
    CHECK(b.max_tokens == r.max_tokens);
    CHECK(b.priority == r.priority);
    CHECK(b.session_key == r.session_key);
    CHECK(b.user == r.user);
    CHECK(b.api_key == r.api_key);
    CHECK((b.arm == r.arm && b.request_class == r.request_class && b.client == r.client && b.model == r.model));
    CHECK(b.sampling.temperature == r.sampling.temperature);
    CHECK(b.sampling.top_k == r.sampling.top_k);
    CHECK(b.sampling.top_p == r.sampling.top_p);
    CHECK(b.sampling.seed == r.sampling.seed);
    CHECK(b.sampling.top_logprobs == r.sampling.top_logprobs);
    CHECK(b.sampling.penalty_last_n == -1);
    CHECK(b.sampling.logit_bias == r.sampling.logit_bias);
    CHECK((b.seeded == r.seeded && b.logprobs == r.logprobs && b.ignore_eos == r.ignore_eos));
    CHECK(b.max_draft == r.max_draft);
    CHECK(b.kv_handoff == r.kv_handoff);
    CHECK(b.cache_salt == r.cache_salt);
    CHECK(b.stream == nullptr);

    TokenBatch t{rng(), rng() % 1000, {}};
    for (size_t i = rng() % 10; i > 0; --i) t.tokens.push_back(random_token(rng));
    TokenBatch tb = decode_tokens(encode(t));
    CHECK((tb.seq == t.seq && tb.first == t.first && tb.tokens.size() == t.tokens.size()));
    for (size_t i = 0; i < std::min(tb.tokens.size(), t.tokens.size()); ++i) CHECK(same(tb.tokens[i], t.tokens[i]));

    GenerateResult res;
    for (size_t i = rng() % 40; i > 0; --i) res.tokens.push_back(int32_t(rng() % 32000));
    res.finish_reason = rng() % 2 ? "stop" : "length";
    res.engine = "main";
    res.error = random_text(rng, 30);
    res.logprobs.push_back(random_token(rng));
    res.ttft_s = 0.25;
    if (rng() % 2) res.itl_s = 0.01;
    GenerateResult rb = decode_result(encode(res));
    CHECK(rb.tokens == res.tokens);
    CHECK(rb.finish_reason == res.finish_reason);
    CHECK(rb.error == res.error);
    CHECK((rb.logprobs.size() == 1 && same(rb.logprobs[0], res.logprobs[0])));
    CHECK(rb.ttft_s == res.ttft_s);
    CHECK(rb.itl_s == res.itl_s);
    CHECK(!rb.e2e_s);
    CHECK(rb.refused_status == 0);

    GenerateResult refused = GenerateResult::failed("main", "client limit");
    refused.refused_status = rng() % 2 ? 429 : 503;
    refused.retry_after_s = uint32_t(rng() % 60);
    GenerateResult fb = decode_result(encode(refused));
    CHECK(fb.refused_status == refused.refused_status);
    CHECK(fb.retry_after_s == refused.retry_after_s);
  }
}

TEST_CASE("cluster wire: hellos and engine lists survive the round trip", "[cluster][wire]") {
  Welcome w;
  w.hello.node = "worker-1";
  w.hello.role = "worker";
  w.hello.certificate = "-----BEGIN CERTIFICATE-----\n...";
  w.hello.nonce = std::string("\0\1\2\3", 4);
  w.hello.signature = std::string(72, '\xff');
  EngineInfo e;
  e.name = "main";
  e.model = "stories";
  e.device = "cpu";
  e.kv_positions = 16384;
  e.prefix_cache = true;
  e.window_cap = 256;
  e.plugins = {{"attention", "attention.cpu_flash"}, {"kvcache", "kvcache.paged"}};
  e.serving = false;
  e.down_reason = "plugin fault";
  e.role = "decode";
  w.engines = {e};
  Welcome b = decode_welcome(encode(w));
  CHECK(b.hello.node == "worker-1");
  CHECK(b.hello.role == "worker");
  CHECK(b.hello.nonce == w.hello.nonce);
  CHECK(b.hello.signature == w.hello.signature);
  REQUIRE(b.engines.size() == 1);
  CHECK(b.engines[0].name == "main");
  CHECK(b.engines[0].kv_positions == 16384);
  CHECK(b.engines[0].prefix_cache);
  CHECK(b.engines[0].window_cap == 256);
  CHECK(b.engines[0].plugins == e.plugins);
  CHECK(!b.engines[0].serving);
  CHECK(b.engines[0].down_reason == "plugin fault");
  CHECK(b.engines[0].role == "decode");
  CHECK(decode_engines(encode(w.engines)).size() == 1);
}

TEST_CASE("cluster wire: a peer's malformed messages are refused, naming the message and field", "[cluster][wire]") {
  auto refused = [](auto decode, const std::string& bytes, const std::string& says) {
    try {
      decode(bytes);
      FAIL("accepted: expected '" << says << "'");
    } catch (const WireError& e) {
      CHECK_THAT(e.what(), Catch::Contains(says));
    }
  };
  refused(decode_hello, "\xc1 not msgpack", "hello: not MessagePack");
  refused(decode_hello, msgpack(nlohmann::json::array({1, 2})), "hello: not a map");
  refused(decode_hello, msgpack({{"v", 2}, {"node", "x"}, {"cert", ""}, {"nonce", ""}, {"sig", ""}, {"role", "head"}}),
          "hello.v: protocol version 2");
  refused(decode_hello, msgpack({{"v", 1}, {"node", "x"}, {"cert", ""}, {"nonce", ""}, {"sig", ""}, {"role", "boss"}}), "hello.role");
  refused(decode_hello, msgpack({{"v", 1}, {"node", 7}}), "hello.node: not a string");
  GenerateRequest r;
  r.prompt = {1, 2, 3};
  nlohmann::json g = nlohmann::json::from_msgpack(encode(RemoteGenerate{"main", r}));
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json c = g;
    c[key] = std::move(v);
    return msgpack(c);
  };
  refused(decode_generate, with("prompt", nlohmann::json::array()), "generate.prompt: empty");
  refused(decode_generate, with("prompt", {1, -5}), "generate.prompt[1]: not a token id");
  refused(decode_generate, with("prompt", {1, "a"}), "generate.prompt[1]: not an integer");
  refused(decode_generate, with("max_tokens", -1), "generate.max_tokens: not an unsigned integer");
  refused(decode_generate, with("max_draft", 1000), "generate.max_draft: above");
  refused(decode_generate, with("sampling", 3), "generate.sampling: not a map");
  refused(decode_generate, with("logprobs", "yes"), "generate.logprobs: not a boolean");
  nlohmann::json s = g;
  s.erase("engine");
  refused(decode_generate, msgpack(s), "generate.engine: missing");
  refused(decode_tokens, msgpack({{"seq", 1}, {"first", 0}, {"tokens", {{1, 0.5, 0.1, nlohmann::json::array()}}}}),
          "logprob above 0");
  refused(decode_tokens, msgpack({{"seq", 1}, {"first", 0}, {"tokens", {{1, -0.5}}}}), "not [token, logprob, entropy, top]");
  refused(decode_result, msgpack({{"tokens", {1}}, {"finish", "exploded"}}), "unknown finish reason");
  refused(decode_result, msgpack({{"tokens", {1}}, {"finish", "error"}, {"refused", 200}}), "result.refused: not a refusal's status");
  refused(decode_result, msgpack({{"tokens", {1}}, {"finish", "stop"}, {"refused", 429}}), "result.refused: not a refusal's status");
  refused(decode_engines, msgpack({{"engines", {{{"name", ""}, {"model", "m"}, {"device", "cpu"}, {"kv", 1}, {"plugins", nlohmann::json::object()}}}}}),
          "name: empty");
  refused(decode_engines,
          msgpack({{"engines", {{{"name", "e"}, {"model", "m"}, {"device", "cpu"}, {"kv", 1}, {"plugins", nlohmann::json::object()}, {"role", "boss"}}}}}),
          "engines.engines[0].role: \"boss\" is not both, prefill or decode");
  // A node that sends no role (an older one) serves both stages.
  CHECK(decode_engines(msgpack({{"engines", {{{"name", "e"}, {"model", "m"}, {"device", "cpu"}, {"kv", 1}, {"plugins", nlohmann::json::object()}}}}}))[0].role == "both");
  refused(decode_hello, std::string(kMaxWireBytes + 1, '\0'), "larger than");
}

TEST_CASE("cluster wire: a head's slot change and the node's answer survive the round trip, and malformed ones are refused",
          "[cluster][wire]") {
  SlotChange c{"main", "scheduler", "scheduler.fifo", "max_waiting = 8\n[nested]\nx = \"y\"\n"};
  SlotChange d = decode_slot_change(encode(c));
  CHECK(d.engine == "main");
  CHECK(d.slot == "scheduler");
  CHECK(d.plugin == "scheduler.fifo");
  CHECK(d.config_toml == c.config_toml);
  CHECK(decode_slot_change(encode(SlotChange{"main", "spec_decode", "", ""})).plugin.empty());
  AdminReply ok = decode_admin_reply(encode(AdminReply{true, 200, "scheduler -> scheduler.fifo"}));
  CHECK(ok.ok);
  CHECK(ok.message == "scheduler -> scheduler.fifo");
  AdminReply no = decode_admin_reply(encode(AdminReply{false, 422, "its check() refused"}));
  CHECK(!no.ok);
  CHECK(no.status == 422);
  auto says = [](auto decode, const std::string& bytes) -> std::string {
    try {
      decode(bytes);
    } catch (const WireError& e) {
      return e.what();
    }
    return "accepted";
  };
  CHECK_THAT(says(decode_slot_change, msgpack({{"slot", "scheduler"}})), Catch::Contains("slot_change.engine: missing"));
  CHECK_THAT(says(decode_slot_change, msgpack({{"engine", "main"}, {"slot", std::string(65, 's')}})),
             Catch::Contains("slot_change.slot: longer than 64 bytes"));
  CHECK_THAT(says(decode_admin_reply, msgpack({{"ok", false}, {"status", 200}})), Catch::Contains("a refusal's status below 400"));
  CHECK_THAT(says(decode_admin_reply, msgpack({{"ok", true}, {"status", 600}})), Catch::Contains("admin_reply.status: above 599"));
}

TEST_CASE("cluster wire: prefix summaries and the versions a head holds survive the round trip, malformed ones are refused", "[cluster][wire]") {
  auto rng = testing::fresh_rng("cluster wire prefix");
  std::vector<EngineInfo> engines(3);
  for (size_t i = 0; i < engines.size(); ++i) {
    engines[i].name = "e" + std::to_string(i);
    engines[i].model = "m";
    engines[i].device = "cpu";
    engines[i].prefix_cache = i > 0;
  }
  engines[1].prefix_block = 16;
  engines[1].prefix_version = rng();
  engines[1].has_prefix_keys = true;
  engines[1].prefix_keys.resize(rng() % 3000);
  for (auto& k : engines[1].prefix_keys) k = rng();
  engines[2].prefix_block = 32;
  engines[2].prefix_version = 7;  // unchanged since the head's copy: no keys
  const auto back = decode_engines(encode(engines));
  REQUIRE(back.size() == 3);
  CHECK(back[0].prefix_block == 0);
  CHECK_FALSE(back[0].has_prefix_keys);
  CHECK(back[1].prefix_block == 16);
  CHECK(back[1].prefix_version == engines[1].prefix_version);
  CHECK(back[1].has_prefix_keys);
  CHECK(back[1].prefix_keys == engines[1].prefix_keys);
  CHECK(back[2].prefix_version == 7);
  CHECK_FALSE(back[2].has_prefix_keys);

  PrefixVersions held;
  for (int i = 0; i < 20; ++i) held.versions["engine-" + std::to_string(rng() % 1000)] = rng();
  CHECK(decode_prefix_versions(encode(held)).versions == held.versions);

  auto refused = [](auto decode, const nlohmann::json& j) {
    try {
      decode(msgpack(j));
    } catch (const WireError& e) {
      return std::string(e.what());
    }
    return std::string("taken");
  };
  nlohmann::json e = {{"name", "e"}, {"model", "m"}, {"device", "cpu"}, {"kv", 0}, {"prefix", true}, {"plugins", nlohmann::json::object()},
                      {"serving", true}, {"pblock", 16}, {"pkeys", nlohmann::json::binary({1, 2, 3})}};
  CHECK_THAT(refused(decode_engines, {{"engines", {e}}}), Catch::Contains("engines.engines[0].pkeys: not a whole number of 8-byte keys"));
  e["pkeys"] = nlohmann::json::binary(std::vector<uint8_t>(16, 0));
  e.erase("pblock");
  CHECK_THAT(refused(decode_engines, {{"engines", {e}}}), Catch::Contains("keys without a block size"));
  CHECK_THAT(refused(decode_prefix_versions, {{"versions", {{"e", -1}}}}), Catch::Contains("prefix_versions.versions.e: not an unsigned integer"));
  CHECK_THAT(refused(decode_prefix_versions, {{"versions", 3}}), Catch::Contains("not a map"));
}

}  // namespace cluster_wire_tests
