// kv_connector rules (ABI 1.9): blocks saved under random keys come back byte for byte into other blocks
// of a pool (f32, f16, q8_0 with its scales), contains() counts leading keys only and never across
// namespaces, every transfer completes exactly once with a count within its blocks, a cancelled load
// still completes, and receive() (when the plugin takes messages) survives random bytes. The pools are the runner's own host memory, laid out as th_kvcache.h describes.
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "conformance/conformance.hpp"
#include "plugin/host_api.hpp"

namespace tokenhost::conformance {
namespace {

// A pool of n_blocks blocks in host memory, [layer][block][head][token][dim] (and, q8_0, f32 scales
// [layer][block][head][token][group]), filled with random bytes.
struct Pool {
  th_kv_layout layout{};
  std::vector<unsigned char> k, v, ks, vs;

  Pool(th_dtype dtype, uint32_t n_blocks, Rng& rng) {
    th_kv_layout& l = layout;
    l.struct_size = sizeof l;
    l.block_size = 4;
    l.n_blocks = n_blocks;
    l.n_layers = 2;
    l.n_kv_heads = 2;
    l.head_dim = 32;
    l.dtype = dtype;
    const size_t elem = dtype == TH_DTYPE_F32 ? 4 : dtype == TH_DTYPE_F16 ? 2 : 1;
    l.quant_group = dtype == TH_DTYPE_Q8_0 ? 32 : 0;
    l.token_stride = int64_t(l.head_dim * elem);
    l.head_stride = l.token_stride * l.block_size;
    l.block_stride = l.head_stride * l.n_kv_heads;
    l.layer_stride = l.block_stride * n_blocks;
    k.resize(size_t(l.layer_stride) * l.n_layers);
    v.resize(k.size());
    for (auto* p : {&k, &v})
      for (auto& b : *p) b = static_cast<unsigned char>(rng());
    l.k_base = k.data();
    l.v_base = v.data();
    if (dtype == TH_DTYPE_Q8_0) {
      l.scale_token_stride = sizeof(float) * (l.head_dim / l.quant_group);
      l.scale_head_stride = l.scale_token_stride * l.block_size;
      l.scale_block_stride = l.scale_head_stride * l.n_kv_heads;
      l.scale_layer_stride = l.scale_block_stride * n_blocks;
      ks.resize(size_t(l.scale_layer_stride) * l.n_layers);
      vs.resize(ks.size());
      for (auto* p : {&ks, &vs})
        for (auto& b : *p) b = static_cast<unsigned char>(rng());
      l.k_scale_base = ks.data();
      l.v_scale_base = vs.data();
    }
    l.device = TH_DEVICE_CPU;
  }

  // Every byte of block b (elements and scales), in one order.
  std::vector<unsigned char> bytes(int32_t b) const {
    std::vector<unsigned char> out;
    auto take = [&](const std::vector<unsigned char>& pool, int64_t layer_stride, int64_t block_stride) {
      for (uint32_t l = 0; l < layout.n_layers; ++l) {
        const unsigned char* p = pool.data() + l * layer_stride + b * block_stride;
        out.insert(out.end(), p, p + block_stride);
      }
    };
    take(k, layout.layer_stride, layout.block_stride);
    take(v, layout.layer_stride, layout.block_stride);
    if (!ks.empty()) {
      take(ks, layout.scale_layer_stride, layout.scale_block_stride);
      take(vs, layout.scale_layer_stride, layout.scale_block_stride);
    }
    return out;
  }
};

struct Connector {
  explicit Connector(PluginInstance& i) : inst(i) {}
  PluginInstance& inst;
  uint64_t next_ticket = 1;
  std::map<uint64_t, th_kv_completion> done;  // by ticket, each seen once
  std::string last_message;

  uint32_t contains(uint64_t ns, const std::vector<uint64_t>& keys) {
    uint32_t n = 12345;
    th_error err;
    const th_status st = inst.call(&th_kv_connector_vtable::contains, "contains", inst.handle(), ns, keys.data(), uint32_t(keys.size()), &n, &err);
    expect(st == TH_OK, "contains() returned " + status_name(st) + ": " + err.text());
    expect(n <= keys.size(), "contains() counted " + std::to_string(n) + " of " + std::to_string(keys.size()) + " keys");
    return n;
  }
  uint64_t transfer(bool load, uint64_t ns, const std::vector<uint64_t>& keys, const std::vector<int32_t>& blocks, const Pool& pool) {
    const uint64_t ticket = next_ticket++;
    th_kv_transfer t{sizeof t, ticket, ns, keys.data(), blocks.data(), uint32_t(keys.size()), &pool.layout, nullptr};
    th_error err;
    const th_status st = load ? inst.call(&th_kv_connector_vtable::load, "load", inst.handle(), &t, &err)
                              : inst.call(&th_kv_connector_vtable::save, "save", inst.handle(), &t, &err);
    expect(st == TH_OK, std::string(load ? "load" : "save") + "() of " + std::to_string(keys.size()) + " blocks returned " +
                            status_name(st) + ": " + err.text());
    return ticket;
  }
  // Polls until ticket has completed (10 s at most); every completion must be of a ticket given and new.
  th_kv_completion wait(uint64_t ticket, uint32_t n_blocks) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done.count(ticket)) {
      expect(std::chrono::steady_clock::now() < deadline, "transfer " + std::to_string(ticket) + " did not complete within 10 s");
      th_kv_completion out[8];
      uint32_t n = 99;
      inst.call(&th_kv_connector_vtable::poll, "poll", inst.handle(), out, 8u, &n);
      expect(n <= 8, "poll() reported " + std::to_string(n) + " completions into room for 8");
      for (uint32_t i = 0; i < n; ++i) {
        expect(out[i].ticket > 0 && out[i].ticket < next_ticket, "poll() reported ticket " + std::to_string(out[i].ticket) + ", never given");
        expect(!done.count(out[i].ticket), "poll() reported ticket " + std::to_string(out[i].ticket) + " twice");
        if (out[i].status != TH_OK && out[i].message != nullptr) last_message = out[i].message;
        done[out[i].ticket] = out[i];
      }
      if (n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const th_kv_completion c = done.at(ticket);
    expect(c.n_done <= n_blocks, "transfer " + std::to_string(ticket) + " completed " + std::to_string(c.n_done) + " of " +
                                     std::to_string(n_blocks) + " blocks");
    return c;
  }
};

std::vector<uint64_t> random_keys(Rng& rng, size_t n) {
  std::vector<uint64_t> keys(n);
  for (auto& k : keys) k = rng() | 1;
  return keys;
}

}  // namespace

void kv_connector_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r) {
  const char* dtypes[] = {"f32", "f16", "q8_0"};
  const th_dtype types[] = {TH_DTYPE_F32, TH_DTYPE_F16, TH_DTYPE_Q8_0};
  const ModelSpec model = model_shape(4, 2, 32, TH_DTYPE_F16);
  std::string why;
  auto inst = instance_for(catalog, plugin, model, why);
  if (!inst) {
    for (const char* d : dtypes) r.not_applicable(std::string("kv_connector.round_trip.") + d, "check() refuses the model: " + why);
    r.not_applicable("kv_connector.contains_leading", "check() refuses the model: " + why);
    r.not_applicable("kv_connector.cancel_completes", "check() refuses the model: " + why);
    r.not_applicable("kv_connector.receive_checks", "check() refuses the model: " + why);
    return;
  }
  Connector c(*inst);
  for (size_t d = 0; d < 3; ++d) {
    r.rule(std::string("kv_connector.round_trip.") + dtypes[d], [&] {
      for (uint32_t round = 0; round < std::max(1u, o.rounds / 4); ++round) {
        Pool from(types[d], 16, rng), to(types[d], 16, rng);
        const uint32_t n = uniform(rng, 1, 6);
        const uint64_t ns = rng();
        const auto keys = random_keys(rng, n);
        std::vector<int32_t> src, dst;
        std::set<int32_t> used_src, used_dst;
        while (src.size() < n) {
          const int32_t b = int32_t(uniform(rng, 0, 15));
          if (used_src.insert(b).second) src.push_back(b);
        }
        while (dst.size() < n) {
          const int32_t b = int32_t(uniform(rng, 0, 15));
          if (used_dst.insert(b).second) dst.push_back(b);
        }
        std::vector<std::vector<unsigned char>> want;
        for (int32_t b : src) want.push_back(from.bytes(b));
        const uint64_t saved = c.transfer(false, ns, keys, src, from);
        // The bytes are the pool's as save() read them: overwriting the blocks now must not matter.
        for (auto& byte : from.k) byte = static_cast<unsigned char>(byte + 1);
        const th_kv_completion s = c.wait(saved, n);
        expect(s.status == TH_OK && s.n_done == n, "save of " + std::to_string(n) + " blocks completed with status " +
                                                         status_name(s.status) + ", " + std::to_string(s.n_done) + " stored");
        expect(c.contains(ns, keys) == n, "contains() does not count the " + std::to_string(n) + " blocks just saved");
        const uint64_t loaded = c.transfer(true, ns, keys, dst, to);
        const th_kv_completion l = c.wait(loaded, n);
        expect(l.status == TH_OK && l.n_done == n, "load of " + std::to_string(n) + " saved blocks completed with status " +
                                                         status_name(l.status) + ", " + std::to_string(l.n_done) + " loaded: " + c.last_message);
        for (uint32_t i = 0; i < n; ++i)
          expect(to.bytes(dst[i]) == want[i], "block " + std::to_string(i) + " of a round trip came back with other bytes (" + dtypes[d] + ")");
      }
    });
  }
  r.rule("kv_connector.contains_leading", [&] {
    Pool pool(TH_DTYPE_F16, 8, rng);
    const uint64_t ns = rng();
    const auto keys = random_keys(rng, 4);
    // Only the first two and the last are stored: contains() stops at the gap.
    const uint64_t t = c.transfer(false, ns, {keys[0], keys[1], keys[3]}, {0, 1, 3}, pool);
    expect(c.wait(t, 3).status == TH_OK, "a save of 3 blocks failed");
    expect(c.contains(ns, keys) == 2, "contains() over keys stored, stored, missing, stored did not answer 2");
    expect(c.contains(ns ^ 0x5555, keys) == 0, "contains() found blocks under another namespace");
    expect(c.contains(ns, {}) == 0, "contains() of no key did not answer 0");
  });
  r.rule("kv_connector.cancel_completes", [&] {
    Pool pool(TH_DTYPE_F16, 8, rng);
    const uint64_t ns = rng();
    const auto keys = random_keys(rng, 3);
    expect(c.wait(c.transfer(false, ns, keys, {0, 1, 2}, pool), 3).status == TH_OK, "a save of 3 blocks failed");
    const uint64_t t = c.transfer(true, ns, keys, {5, 6, 7}, pool);
    inst->call(&th_kv_connector_vtable::cancel, "cancel", inst->handle(), t);
    inst->call(&th_kv_connector_vtable::cancel, "cancel", inst->handle(), uint64_t(987654321));  // unknown: ignored
    c.wait(t, 3);  // completes, given up or done
    th_kv_connector_stats st{};
    st.struct_size = sizeof st;
    inst->call(&th_kv_connector_vtable::stats, "stats", inst->handle(), &st);
    expect(st.struct_size > 0 && st.struct_size <= sizeof st, "stats() wrote struct_size " + std::to_string(st.struct_size));
    expect(st.capacity_bytes == 0 || st.stored_bytes <= st.capacity_bytes,
           "stats() reports " + std::to_string(st.stored_bytes) + " bytes stored over a capacity of " + std::to_string(st.capacity_bytes));
  });
  // receive() (optional) takes bytes from anywhere: random messages, empty ones and ones cut short
  // neither crash it nor change what it holds.
  if (inst->fn(&th_kv_connector_vtable::receive) == nullptr) {
    r.not_applicable("kv_connector.receive_checks", "the plugin takes no messages (receive is NULL)");
    return;
  }
  r.rule("kv_connector.receive_checks", [&] {
    Pool pool(TH_DTYPE_F16, 8, rng);
    const uint64_t ns = rng();
    const auto keys = random_keys(rng, 3);
    expect(c.wait(c.transfer(false, ns, keys, {0, 1, 2}, pool), 3).status == TH_OK, "a save of 3 blocks failed");
    auto stored = [&] {
      th_kv_connector_stats st{};
      st.struct_size = sizeof st;
      inst->call(&th_kv_connector_vtable::stats, "stats", inst->handle(), &st);
      return st.stored_blocks;
    };
    const uint64_t before = stored();
    for (uint32_t i = 0; i < std::max(8u, o.rounds); ++i) {
      std::vector<unsigned char> bytes(uniform(rng, 0, 4096));
      for (auto& b : bytes) b = static_cast<unsigned char>(rng());
      if (bytes.size() >= 4 && i % 2 == 0) bytes[0] = 0x31, bytes[1] = 0x4b, bytes[2] = 0, bytes[3] = 0;  // kv_connector.actor's BLOCKS tag, garbage after
      inst->call(&th_kv_connector_vtable::receive, "receive", inst->handle(), "conformance", static_cast<const void*>(bytes.data()), bytes.size());
    }
    inst->call(&th_kv_connector_vtable::receive, "receive", inst->handle(), "conformance", static_cast<const void*>(nullptr), size_t(0));
    expect(stored() == before, "random messages changed the blocks held from " + std::to_string(before) + " to " + std::to_string(stored()));
    expect(c.contains(ns, keys) == 3, "after random messages, contains() no longer finds the 3 blocks saved before");
  });
}

}  // namespace tokenhost::conformance
