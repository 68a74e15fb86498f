// A KV connector instance driven as the host drives one (contains, a transfer, poll until it completes,
// stats), and a pool of random blocks to move: what the connectors' tests share.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <tokenhost/plugin_kv_blocks.hpp>

#include "harness.hpp"
#include "kv_cache.hpp"

namespace tokenhost::testing {

struct ConnectorClient {
  std::shared_ptr<PluginInstance> inst;
  const th_kv_connector_vtable* vt;
  uint64_t next_ticket = 1;
  std::map<uint64_t, th_kv_completion> done;
  std::map<uint64_t, std::string> messages;  // of the failed ones

  // An instance of plugin id on engine, its messages (th_host_api.peer_send) carried by peers.
  ConnectorClient(const std::string& id, const toml::table& config, std::shared_ptr<PeerPost> peers = nullptr,
                  const std::string& engine = "test")
      : inst(make_plugin(id, model_spec(), config, nullptr, std::move(peers), engine)), vt(&inst->vtable<th_kv_connector_vtable>()) {}

  uint32_t contains(uint64_t ns, const std::vector<uint64_t>& keys) {
    uint32_t n = 0;
    th_error err;
    REQUIRE(vt->contains(inst->handle(), ns, keys.data(), uint32_t(keys.size()), &n, &err) == TH_OK);
    return n;
  }
  uint64_t transfer(bool load, uint64_t ns, const std::vector<uint64_t>& keys, const std::vector<int32_t>& blocks, const th_kv_layout& layout) {
    const uint64_t ticket = next_ticket++;
    th_kv_transfer t{sizeof t, ticket, ns, keys.data(), blocks.data(), uint32_t(keys.size()), &layout, nullptr};
    th_error err;
    const th_status s = load ? vt->load(inst->handle(), &t, &err) : vt->save(inst->handle(), &t, &err);
    INFO(err.text());
    REQUIRE(s == TH_OK);
    return ticket;
  }
  // Polls once; true when ticket has completed.
  bool poll(uint64_t ticket) {
    th_kv_completion out[8];
    uint32_t n = 0;
    vt->poll(inst->handle(), out, 8, &n);
    for (uint32_t i = 0; i < n; ++i) {
      REQUIRE(!done.count(out[i].ticket));
      done[out[i].ticket] = out[i];
      if (out[i].message != nullptr) messages[out[i].ticket] = out[i].message;
    }
    return done.count(ticket) > 0;
  }
  th_kv_completion wait(uint64_t ticket, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!poll(ticket)) {
      REQUIRE(std::chrono::steady_clock::now() < deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done.at(ticket);
  }
  th_kv_connector_stats stats() {
    th_kv_connector_stats s{};
    s.struct_size = sizeof s;
    vt->stats(inst->handle(), &s);
    return s;
  }
};

// A pool of a kvcache.paged instance (2 layers, 2 kv heads of 32, blocks of 4) with random bytes in
// every block.
struct RandomBlocks {
  KvCache cache;
  RandomBlocks(th_dtype dtype, std::mt19937_64& rng, uint32_t n_blocks = 16)
      : cache("kvcache.paged", with_kv_dtype(model_spec(4, 2, 32, 2), dtype), 4, n_blocks) {
    const th_kv_layout& l = *cache.layout;
    for (int32_t b = 0; b < int32_t(l.n_blocks); ++b) {
      std::vector<char> image(sdk::kv_block_image_bytes(sdk::kv_block_shape(l)));
      for (auto& c : image) c = char(rng());
      sdk::load_kv_block(l, b, image.data());
    }
  }
  const th_kv_layout& layout() const { return *cache.layout; }
  std::vector<char> image(int32_t b) const {
    std::vector<char> out(sdk::kv_block_image_bytes(sdk::kv_block_shape(*cache.layout)));
    sdk::save_kv_block(*cache.layout, b, out.data());
    return out;
  }
};

}  // namespace tokenhost::testing
