// kv_connector.actor between instances on two engines, the test carrying their messages as the host
// does (th_host_api.peer_send into a mailbox, delivered through receive() when the test says): a save
// completes only once the peer stored the blocks and answered, and they load byte for byte there (f32,
// f16, q8_0; a save of several messages); a peer engine that does not run fails the save at once and one
// that stays silent within timeout_ms, both by name; a message whose sizes disagree or that is not the
// connector's is refused and counted, and the sender's save fails; an answer from another engine than
// the one it names counts for nothing; the memory tier stays under max_bytes.
#include <catch2/catch.hpp>

#include <cstring>
#include <deque>
#include <set>
#include <thread>

#include "kv_connector_client.hpp"

namespace kv_connector_actor_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

// The host's side of peer_send for the test's engines: messages wait here until delivered.
struct Mailbox : PeerPost {
  struct Letter {
    std::string from, plugin, to, bytes;
  };
  std::set<std::string> engines;  // the names that run
  std::deque<Letter> letters;
  th_status send(const std::string& from, const std::string& plugin, const std::string& to, std::string bytes, std::string& why) override {
    if (!engines.count(to)) {
      why = "no engine '" + to + "'";
      return TH_ERR_NOT_FOUND;
    }
    letters.push_back({from, plugin, to, std::move(bytes)});
    return TH_OK;
  }
};

struct Engines {
  std::shared_ptr<Mailbox> mail = std::make_shared<Mailbox>();
  std::map<std::string, std::unique_ptr<ConnectorClient>> on;

  ConnectorClient& start(const std::string& engine, const toml::table& config) {
    mail->engines.insert(engine);
    on[engine] = std::make_unique<ConnectorClient>("kv_connector.actor", config, mail, engine);
    return *on[engine];
  }
  void receive(const std::string& to, const std::string& from, const std::string& bytes) {
    ConnectorClient& c = *on.at(to);
    REQUIRE(c.vt->receive != nullptr);
    c.vt->receive(c.inst->handle(), from.c_str(), bytes.data(), bytes.size());
  }
  // Delivers every letter (and the answers they cause) to its engine; returns how many went.
  size_t deliver() {
    size_t n = 0;
    while (!mail->letters.empty()) {
      Mailbox::Letter l = std::move(mail->letters.front());
      mail->letters.pop_front();
      REQUIRE(l.plugin == "kv_connector.actor");
      receive(l.to, l.from, l.bytes);
      ++n;
    }
    return n;
  }
};

std::vector<uint64_t> random_keys(std::mt19937_64& rng, size_t n) {
  std::vector<uint64_t> keys(n);
  for (auto& k : keys) k = rng();
  return keys;
}

}  // namespace

TEST_CASE("kv_connector.actor: a save completes once the peer engine stored the blocks, which load byte for byte there",
          "[plugins][kv_connector][actor]") {
  auto rng = fresh_rng("kv_connector.actor round trip");
  Engines e;
  ConnectorClient& prefill = e.start("prefill", toml::table{{"peers", "decode"}});
  ConnectorClient& decode = e.start("decode", toml::table{});
  for (th_dtype dtype : {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_Q8_0}) {
    INFO("dtype " << int(dtype));
    RandomBlocks from(dtype, rng), to(dtype, rng);
    const uint64_t ns = rng();
    const auto keys = random_keys(rng, 6);
    const std::vector<int32_t> source = {3, 9, 0, 15, 7, 4};
    const uint64_t ticket = prefill.transfer(false, ns, keys, source, from.layout());
    REQUIRE_FALSE(prefill.poll(ticket));  // nothing answered yet
    REQUIRE(e.mail->letters.size() == 1);
    REQUIRE(e.mail->letters.front().to == "decode");
    REQUIRE(e.deliver() == 2);  // the blocks, then the answer
    const th_kv_completion saved = prefill.wait(ticket);
    INFO(prefill.messages[ticket]);
    REQUIRE(saved.status == TH_OK);
    REQUIRE(saved.n_done == keys.size());
    REQUIRE(decode.contains(ns, keys) == keys.size());
    REQUIRE(decode.contains(ns ^ 1, keys) == 0);  // another namespace holds nothing
    REQUIRE(prefill.contains(ns, keys) == 0);     // a sender's blocks live at its peers
    const std::vector<int32_t> target = {1, 2, 5, 6, 8, 10};
    const th_kv_completion loaded = decode.wait(decode.transfer(true, ns, keys, target, to.layout()));
    REQUIRE(loaded.status == TH_OK);
    REQUIRE(loaded.n_done == keys.size());
    for (size_t i = 0; i < keys.size(); ++i) REQUIRE(to.image(target[i]) == from.image(source[i]));
  }

  // 2,100 f32 blocks of 4 KiB go as three messages of at most 4 MiB; the save completes with the last
  // answer, and every block loads back.
  RandomBlocks many(TH_DTYPE_F32, rng, 2100), into(TH_DTYPE_F32, rng, 2100);
  const uint64_t ns = rng();
  const auto keys = random_keys(rng, 2100);
  std::vector<int32_t> blocks(2100);
  for (int32_t b = 0; b < 2100; ++b) blocks[size_t(b)] = 2099 - b;
  const uint64_t ticket = prefill.transfer(false, ns, keys, blocks, many.layout());
  REQUIRE(e.mail->letters.size() == 3);
  for (const auto& l : e.mail->letters) REQUIRE(l.bytes.size() <= (size_t(4) << 20) + 64);
  // Two of three delivered and answered: not done yet.
  for (int i = 0; i < 2; ++i) {
    Mailbox::Letter l = e.mail->letters.front();
    e.mail->letters.pop_front();
    e.receive(l.to, l.from, l.bytes);
  }
  Mailbox::Letter last = e.mail->letters.front();
  e.mail->letters.pop_front();
  e.deliver();  // the two answers
  REQUIRE_FALSE(prefill.poll(ticket));
  e.receive(last.to, last.from, last.bytes);
  e.deliver();
  REQUIRE(prefill.wait(ticket).status == TH_OK);
  std::vector<int32_t> target(2100);
  for (int32_t b = 0; b < 2100; ++b) target[size_t(b)] = b;
  REQUIRE(decode.wait(decode.transfer(true, ns, keys, target, into.layout())).status == TH_OK);
  for (int32_t b = 0; b < 2100; b += 97) REQUIRE(into.image(b) == many.image(2099 - b));
}

TEST_CASE("kv_connector.actor: a peer engine that does not run or stays silent fails the save by name",
          "[plugins][kv_connector][actor]") {
  auto rng = fresh_rng("kv_connector.actor peers");
  Engines e;
  ConnectorClient& prefill = e.start("prefill", toml::table{{"peers", "decode, nowhere"}, {"timeout_ms", 50}});
  e.start("decode", toml::table{});
  RandomBlocks pool(TH_DTYPE_F16, rng);
  const uint64_t ns = rng();
  // "nowhere" does not run: the host refuses the message and the save fails naming it, once decode answered.
  const uint64_t t1 = prefill.transfer(false, ns, random_keys(rng, 2), {1, 2}, pool.layout());
  e.deliver();
  const th_kv_completion c1 = prefill.wait(t1);
  REQUIRE(c1.status != TH_OK);
  REQUIRE(c1.n_done == 0);
  REQUIRE(prefill.messages[t1].find("nowhere") != std::string::npos);
  // decode stays silent (its messages are never delivered): the save fails after timeout_ms.
  ConnectorClient& lone = e.start("lone", toml::table{{"peers", "decode"}, {"timeout_ms", 50}});
  const uint64_t t2 = lone.transfer(false, ns, random_keys(rng, 1), {3}, pool.layout());
  e.mail->letters.clear();
  const auto started = std::chrono::steady_clock::now();
  const th_kv_completion c2 = lone.wait(t2);
  REQUIRE(std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(40));
  REQUIRE(c2.status != TH_OK);
  REQUIRE(lone.messages[t2].find("no answer from peer decode within 50 ms") != std::string::npos);
}

TEST_CASE("kv_connector.actor: messages whose sizes disagree, foreign bytes and false answers are refused",
          "[plugins][kv_connector][actor]") {
  auto rng = fresh_rng("kv_connector.actor refusal");
  Engines e;
  ConnectorClient& prefill = e.start("prefill", toml::table{{"peers", "decode"}, {"timeout_ms", 5000}});
  ConnectorClient& decode = e.start("decode", toml::table{{"max_bytes", 8192}});
  RandomBlocks pool(TH_DTYPE_F32, rng);
  const uint64_t ns = rng();
  const auto keys = random_keys(rng, 2);

  // The blocks message cut short: refused, counted (2 blocks claimed), and answered with a failure.
  const uint64_t t1 = prefill.transfer(false, ns, keys, {0, 1}, pool.layout());
  REQUIRE(e.mail->letters.size() == 1);
  Mailbox::Letter cut = e.mail->letters.front();
  e.mail->letters.pop_front();
  cut.bytes.resize(cut.bytes.size() - 100);
  e.receive(cut.to, cut.from, cut.bytes);
  REQUIRE(decode.stats().refused_blocks == 2);
  REQUIRE(decode.stats().stored_blocks == 0);
  e.deliver();  // the failed answer
  const th_kv_completion c1 = prefill.wait(t1);
  REQUIRE(c1.status != TH_OK);
  REQUIRE(prefill.messages[t1].find("peer decode refused the blocks") != std::string::npos);

  // Bytes that are no message of the connector, and an empty message: refused, nothing stored.
  e.receive("decode", "prefill", std::string(3, 'x'));
  e.receive("decode", "prefill", "");
  e.receive("decode", "prefill", std::string(200, '\x7f'));
  REQUIRE(decode.stats().refused_blocks == 5);
  REQUIRE(decode.stats().stored_blocks == 0);

  // An answer from another engine than the peer it names is ignored; the real one completes the save.
  const uint64_t t2 = prefill.transfer(false, ns, keys, {0, 1}, pool.layout());
  Mailbox::Letter blocks = e.mail->letters.front();
  e.mail->letters.pop_front();
  e.receive(blocks.to, blocks.from, blocks.bytes);
  REQUIRE(e.mail->letters.size() == 1);
  const std::string answer = e.mail->letters.front().bytes;
  e.mail->letters.pop_front();
  e.receive("prefill", "mallory", answer);
  REQUIRE_FALSE(prefill.poll(t2));
  e.receive("prefill", "decode", answer);
  REQUIRE(prefill.wait(t2).status == TH_OK);

  // The tier keeps under its cap: an f32 image here is 2 layers x keys and values x 2 kv heads x 4
  // positions x 32 x 4 bytes = 4,096 bytes, so 8,192 bytes hold two of three.
  const auto three = random_keys(rng, 3);
  const uint64_t t3 = prefill.transfer(false, ns, three, {2, 3, 4}, pool.layout());
  e.deliver();
  REQUIRE(prefill.wait(t3).status == TH_OK);
  const th_kv_connector_stats s = decode.stats();
  REQUIRE(s.stored_bytes <= s.capacity_bytes);
  REQUIRE(s.stored_blocks == 2);
  REQUIRE(decode.contains(ns, {three[1], three[2]}) == 2);
  REQUIRE(decode.contains(ns, {three[0]}) == 0);
}

}  // namespace kv_connector_actor_tests
