// kv_connector.ucx between two instances in one process over TCP and shared memory (tls = "tcp,sm"):
// a save completes only once the peer holds the blocks, which then load byte for byte into another
// pool (f32, f16, q8_0 with its scales, random contents and keys); a peer that is not there fails the
// save by name within timeout_ms and one that comes back is sent to again; a message whose sizes
// disagree (sent with UCX by the test itself) is refused and counted, and the instance goes on
// receiving; the memory tier stays under max_bytes.
#include <catch2/catch.hpp>

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include <tokenhost/plugin_kv_blocks.hpp>

#include "kv_connector_client.hpp"
#include "raw_client.hpp"

namespace kv_connector_ucx_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

std::string address(int port) { return "127.0.0.1:" + std::to_string(port); }

// An instance of kv_connector.ucx with config (tls "tcp,sm" unless given).
struct Connector : ConnectorClient {
  explicit Connector(toml::table config) : ConnectorClient("kv_connector.ucx", with_tls(std::move(config))) {}
  static toml::table with_tls(toml::table config) {
    if (!config.contains("tls")) config.insert("tls", "tcp,sm");
    return config;
  }
};

using Pool = RandomBlocks;

// A UCX client of the test's own, for messages no instance would send.
struct RawSender {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  explicit RawSender(int port) {
    ucp_config_t* config = nullptr;
    REQUIRE(ucp_config_read(nullptr, nullptr, &config) == UCS_OK);
    REQUIRE(ucp_config_modify(config, "TLS", "tcp,sm") == UCS_OK);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM;
    REQUIRE(ucp_init(&params, config, &context) == UCS_OK);
    ucp_config_release(config);
    ucp_worker_params_t wp{};
    REQUIRE(ucp_worker_create(context, &wp, &worker) == UCS_OK);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;  // as the connector's endpoints: UCX refuses a mismatch
    ep_params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&a);
    ep_params.sockaddr.addrlen = sizeof a;
    REQUIRE(ucp_ep_create(worker, &ep_params, &ep) == UCS_OK);
  }
  ~RawSender() {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker);
      ucp_request_free(r);
    }
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
  }
  // Sends an active message with the connector's BLOCKS id and waits for it to leave.
  void send(const void* header, size_t header_bytes, const std::vector<char>& data) {
    ucp_request_param_t p{};
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, 0x4b31, header, header_bytes, data.data(), data.size(), &p);
    REQUIRE(!UCS_PTR_IS_ERR(r));
    if (r != nullptr) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker);
      ucp_request_free(r);
    }
    for (int i = 0; i < 200; ++i) ucp_worker_progress(worker);
  }
};

}  // namespace

TEST_CASE("kv_connector.ucx: a save completes once the peer holds the blocks, which load byte for byte there",
          "[plugins][kv_connector][ucx]") {
  auto rng = fresh_rng("kv_connector.ucx round trip");
  // Messages go eagerly (copied through UCX's buffers) or by rendezvous (received into the tier's own
  // buffer) by their size: both ways, every message over 1 KiB taking the second.
  const bool rendezvous = GENERATE(false, true);
  INFO((rendezvous ? "rendezvous" : "eager"));
  if (rendezvous) setenv("UCX_RNDV_THRESH", "1024", 1);
  else unsetenv("UCX_RNDV_THRESH");
  const int port = free_tcp_port();
  Connector receiver(toml::table{{"listen", address(port)}});
  Connector sender(toml::table{{"peers", address(port)}});
  for (th_dtype dtype : {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_Q8_0}) {
    INFO("dtype " << int(dtype));
    Pool from(dtype, rng), to(dtype, rng);
    const uint64_t ns = rng();
    std::vector<uint64_t> keys(6);
    for (auto& k : keys) k = rng();
    const std::vector<int32_t> source = {3, 9, 0, 15, 7, 4};
    REQUIRE(receiver.contains(ns, keys) == 0);
    const th_kv_completion saved = sender.wait(sender.transfer(false, ns, keys, source, *from.cache.layout));
    INFO(sender.messages[saved.ticket]);
    REQUIRE(saved.status == TH_OK);
    REQUIRE(saved.n_done == keys.size());
    // Stored at the peer before the save was reported: contains() sees every key at once.
    REQUIRE(receiver.contains(ns, keys) == keys.size());
    REQUIRE(receiver.contains(ns ^ 1, keys) == 0);  // another namespace holds nothing
    const std::vector<int32_t> target = {1, 2, 5, 6, 8, 10};
    const th_kv_completion loaded = receiver.wait(receiver.transfer(true, ns, keys, target, *to.cache.layout));
    REQUIRE(loaded.status == TH_OK);
    REQUIRE(loaded.n_done == keys.size());
    for (size_t i = 0; i < keys.size(); ++i) REQUIRE(to.image(target[i]) == from.image(source[i]));
    // A sender's blocks live at its peers.
    REQUIRE(sender.contains(ns, keys) == 0);
  }
  // A load of a block of another shape under the same keys is refused, not written.
  Pool f32(TH_DTYPE_F32, rng), f16(TH_DTYPE_F16, rng);
  std::vector<uint64_t> keys = {rng()};
  const uint64_t ns = rng();
  REQUIRE(sender.wait(sender.transfer(false, ns, keys, {2}, *f32.cache.layout)).status == TH_OK);
  const auto before = f16.image(3);
  const th_kv_completion wrong = receiver.wait(receiver.transfer(true, ns, keys, {3}, *f16.cache.layout));
  REQUIRE(wrong.status != TH_OK);
  REQUIRE(wrong.n_done == 0);
  REQUIRE(receiver.messages[wrong.ticket].find("another KV shape") != std::string::npos);
  REQUIRE(f16.image(3) == before);
  REQUIRE(receiver.stats().refused_blocks == 1);
}

TEST_CASE("kv_connector.ucx: a missing peer fails the save by name, and a peer that comes back is sent to again",
          "[plugins][kv_connector][ucx]") {
  auto rng = fresh_rng("kv_connector.ucx peers");
  const int port = free_tcp_port();
  Connector sender(toml::table{{"peers", address(port)}, {"timeout_ms", 400}});
  Pool pool(TH_DTYPE_F16, rng);
  const uint64_t ns = rng();
  const auto t0 = std::chrono::steady_clock::now();
  const th_kv_completion failed = sender.wait(sender.transfer(false, ns, {rng()}, {1}, *pool.cache.layout));
  REQUIRE(failed.status != TH_OK);
  REQUIRE(failed.n_done == 0);
  REQUIRE(sender.messages[failed.ticket].find(address(port)) != std::string::npos);
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
  // The peer starts: the next saves reach it (the sender reconnects).
  Connector receiver(toml::table{{"listen", address(port)}});
  std::vector<uint64_t> keys = {rng(), rng()};
  th_kv_completion ok{};
  for (int attempt = 0; attempt < 20; ++attempt) {
    ok = sender.wait(sender.transfer(false, ns, keys, {4, 5}, *pool.cache.layout));
    if (ok.status == TH_OK) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  INFO(sender.messages[ok.ticket]);
  REQUIRE(ok.status == TH_OK);
  REQUIRE(receiver.contains(ns, keys) == 2);
}

TEST_CASE("kv_connector.ucx: a message whose sizes disagree is refused and counted, and the instance goes on receiving",
          "[plugins][kv_connector][ucx]") {
  auto rng = fresh_rng("kv_connector.ucx refusal");
  const int port = free_tcp_port();
  Connector receiver(toml::table{{"listen", address(port)}, {"max_bytes", 8192}});
  {
    RawSender raw(port);
    // The connector's header (magic "THKV", version 1, message, namespace, shape, image bytes, n, peer)
    // claiming 4 blocks of 1,000 bytes over a payload of 100 bytes.
    struct {
      uint32_t magic, version;
      uint64_t message, ns, shape, image_bytes;
      uint32_t n_blocks, peer;
    } h{0x564b4854, 1, 1, 42, 7, 1000, 4, 0};
    raw.send(&h, sizeof h, std::vector<char>(100, 'x'));
    raw.send(&h, 12, std::vector<char>(100, 'x'));  // a header cut short
    // The sender stays connected until both arrived (closing it forcibly may drop what the receiver
    // has not read yet, on a busy machine); 5 s at most.
    for (int i = 0; i < 2500 && receiver.stats().refused_blocks < 5; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(receiver.stats().refused_blocks == 5);  // 4 claimed, then 1 for the header it could not read
  REQUIRE(receiver.stats().stored_blocks == 0);
  REQUIRE(receiver.contains(42, {1, 2, 3, 4}) == 0);
  // A real sender still gets through, and the tier keeps under its cap: an f32 image here is 2 layers x
  // keys and values x 2 kv heads x 4 positions x 32 x 4 bytes = 4,096 bytes, so 8,192 bytes hold two.
  Connector sender(toml::table{{"peers", address(port)}});
  Pool pool(TH_DTYPE_F32, rng);
  const uint64_t ns = rng();
  std::vector<uint64_t> keys = {rng(), rng(), rng()};
  REQUIRE(sender.wait(sender.transfer(false, ns, keys, {0, 1, 2}, *pool.cache.layout)).status == TH_OK);
  const th_kv_connector_stats s = receiver.stats();
  REQUIRE(s.stored_bytes <= s.capacity_bytes);
  REQUIRE(s.stored_blocks == 2);
  REQUIRE(s.evicted_blocks == 1);
  REQUIRE(receiver.contains(ns, {keys[1], keys[2]}) == 2);  // the most recent stay
  REQUIRE(receiver.contains(ns, {keys[0]}) == 0);
}

}  // namespace kv_connector_ucx_tests
