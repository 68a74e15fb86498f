// What moving KV blocks costs on this machine, the floors and the connectors (issue 32): for the 110M
// and 1.1B shapes in f16 and q8_0, a transfer of 64 blocks of 16 positions (a 1,024-token prompt):
//   memcpy    the images' bytes from one buffer to another (the floor of any copy);
//   save      sdk::save_kv_block of 64 pool blocks into images (what a connector's save reads);
//   load      sdk::load_kv_block of 64 images into pool blocks (what a connector's load writes);
//   tcp       the images through one loopback TCP connection to a receiving thread;
//   disk>     kv_connector.disk's save, from the call to its completion (files written to --folder);
//   disk<     its load of those blocks into other blocks of the pool, from the call to its completion;
//   ucx-sm>   kv_connector.ucx's save to a peer instance (tls "tcp,sm": UCX takes shared memory for the
//             data within a machine), from the call to the completion after the peer's acknowledgement;
//   ucx-tcp>  the same over UCX's TCP transport (tls "tcp");
//   ucx<      the peer's load of those blocks from its memory tier;
//   actor>    kv_connector.actor's save to a peer engine's instance, its messages carried as the host
//             carries them in one process (peer_send copies them into a byte string; the peer's
//             receive() reads it; here both on this thread, where a server hands the string from one
//             worker's mailbox to the other's), from the call to the completion after the answer.
// Blocks are picked at random from a pool of 256 laid out as the SDK's KvBlockPool lays them out, with
// fresh keys each run (a connector stores nothing twice). The ways alternate within each run; GB/s
// (10^9 bytes of images per second), medians of the runs. Before each shape's runs, --warmup untimed
// runs fill the UCX and actor receivers' tiers (max_bytes 96 MB) to their cap, as a serving tier is: the memory
// of dropped blocks is reused, where a tier still growing touches fresh pages (a page fault per 4 KiB,
// which costs more than the copy on this virtual machine).
//
//   bench_kv_transfer [--runs 5] [--warmup 3] [--blocks 64] [--folder /tmp/tokenhost-bench-kv] [--protocol eager]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <tokenhost/plugin_kv_blocks.hpp>

#include "plugin/catalog.hpp"
#include "plugin/instance.hpp"

using namespace tokenhost;
using Clock = std::chrono::steady_clock;

namespace {

struct Shape {
  const char* name;
  uint32_t n_layers, n_kv_heads, head_dim;
};

// A pool of n_blocks blocks of shape s in KvBlockPool's order, random contents.
struct Pool {
  th_kv_layout kv{};
  std::vector<char> k, v, ks, vs;
  Pool(const sdk::KvBlockShape& s, uint32_t n_blocks, std::mt19937_64& rng) {
    kv.struct_size = sizeof kv;
    kv.block_size = s.block_size;
    kv.n_blocks = n_blocks;
    kv.n_layers = s.n_layers;
    kv.n_kv_heads = s.n_kv_heads;
    kv.head_dim = s.head_dim;
    kv.dtype = s.dtype;
    kv.quant_group = s.quant_group;
    kv.token_stride = sdk::kv_vector_bytes(s.dtype, s.head_dim);
    kv.head_stride = kv.token_stride * s.block_size;
    kv.block_stride = kv.head_stride * s.n_kv_heads;
    kv.layer_stride = kv.block_stride * n_blocks;
    k.resize(size_t(kv.layer_stride) * s.n_layers);
    v.resize(k.size());
    kv.k_base = k.data();
    kv.v_base = v.data();
    if (const uint32_t sb = sdk::kv_scale_bytes(s.dtype, s.head_dim, s.quant_group)) {
      kv.scale_token_stride = sb;
      kv.scale_head_stride = int64_t(sb) * s.block_size;
      kv.scale_block_stride = kv.scale_head_stride * s.n_kv_heads;
      kv.scale_layer_stride = kv.scale_block_stride * n_blocks;
      ks.resize(size_t(kv.scale_layer_stride) * s.n_layers);
      vs.resize(ks.size());
      kv.k_scale_base = ks.data();
      kv.v_scale_base = vs.data();
    }
    for (auto* buf : {&k, &v, &ks, &vs})
      for (size_t i = 0; i < buf->size(); i += 8) (*buf)[i] = char(rng());
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

// A loopback TCP connection: send() from the caller's thread, a thread reading everything it gets.
class Loopback {
 public:
  Loopback() {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener, 1) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("loopback listener: " + std::string(std::strerror(errno)));
    out_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(out_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("loopback connect failed");
    in_ = ::accept(listener, nullptr, nullptr);
    ::close(listener);
    int one = 1;
    ::setsockopt(out_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Loopback() {
    ::close(out_);
    ::close(in_);
  }
  // Sends n bytes and returns once the receiver has read all of them.
  void transfer(const char* data, size_t n) {
    std::thread receiver([&] {
      std::vector<char> buf(1 << 20);
      for (size_t got = 0; got < n;) {
        const ssize_t r = ::recv(in_, buf.data(), std::min(buf.size(), n - got), 0);
        if (r <= 0) throw std::runtime_error("loopback recv failed");
        got += size_t(r);
      }
    });
    for (size_t sent = 0; sent < n;) {
      const ssize_t w = ::send(out_, data + sent, n - sent, 0);
      if (w <= 0) throw std::runtime_error("loopback send failed");
      sent += size_t(w);
    }
    receiver.join();
  }

 private:
  int out_ = -1, in_ = -1;
};

class Connector;

// th_host_api.peer_send between the bench's connectors: messages queue here until pump() hands each to
// its engine's connector (receive()).
struct Post : PeerPost {
  struct Letter {
    std::string from, to, bytes;
  };
  std::map<std::string, Connector*> engines;
  std::deque<Letter> letters;
  th_status send(const std::string& from, const std::string&, const std::string& to, std::string bytes, std::string& why) override {
    if (!engines.count(to)) {
      why = "no engine " + to;
      return TH_ERR_NOT_FOUND;
    }
    letters.push_back({from, to, std::move(bytes)});
    return TH_OK;
  }
  void pump();
};

// A KV connector instance driven as the host drives one: a transfer, then poll() until it completes
// (delivering the messages of post, when it has one, between polls).
class Connector {
 public:
  Connector(PluginCatalog& catalog, const std::string& id, const toml::table& config, std::shared_ptr<Post> post = nullptr,
            const std::string& engine = "bench")
      : post_(post) {
    ModelSpec model;
    model.name = "bench";
    inst_ = instantiate(catalog, id, engine, model, config, nullptr, post);
    vt_ = &inst_->vtable<th_kv_connector_vtable>();
    if (post) post->engines[engine] = this;
  }
  void receive(const std::string& from, const std::string& bytes) {
    vt_->receive(inst_->handle(), from.c_str(), bytes.data(), bytes.size());
  }
  // Saves (or loads) blocks under keys and returns once the connector reports the transfer done.
  void transfer(bool load, uint64_t ns, const std::vector<uint64_t>& keys, const std::vector<int32_t>& blocks, const th_kv_layout& kv) {
    const uint64_t ticket = next_++;
    th_kv_transfer t{sizeof t, ticket, ns, keys.data(), blocks.data(), uint32_t(keys.size()), &kv, nullptr};
    th_error err;
    const th_status s = load ? vt_->load(inst_->handle(), &t, &err) : vt_->save(inst_->handle(), &t, &err);
    if (s != TH_OK) throw std::runtime_error(inst_->id() + (load ? " load: " : " save: ") + err.text());
    for (;;) {
      if (post_) post_->pump();
      th_kv_completion out[4];
      uint32_t n = 0;
      vt_->poll(inst_->handle(), out, 4, &n);
      for (uint32_t i = 0; i < n; ++i) {
        if (out[i].ticket != ticket) continue;
        if (out[i].status != TH_OK || out[i].n_done != keys.size())
          throw std::runtime_error(inst_->id() + ": transfer of " + std::to_string(keys.size()) + " blocks moved " +
                                   std::to_string(out[i].n_done) + ": " + (out[i].message ? out[i].message : ""));
        return;
      }
      if (!post_) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  std::shared_ptr<Post> post_;
  std::shared_ptr<PluginInstance> inst_;
  const th_kv_connector_vtable* vt_ = nullptr;
  uint64_t next_ = 1;
};

void Post::pump() {
  while (!letters.empty()) {
    Letter l = std::move(letters.front());
    letters.pop_front();
    engines.at(l.to)->receive(l.from, l.bytes);
    recycle(std::move(l.bytes));  // as a worker gives a delivered message's memory back
  }
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"What moving KV blocks costs: memcpy, block images saved and loaded, loopback TCP"};
  int runs = 5, warmup = 3;
  uint32_t blocks = 64;
  app.add_option("--runs", runs, "runs (the ways alternate within each)")->check(CLI::Range(1, 100));
  app.add_option("--warmup", warmup, "untimed runs before each shape's")->check(CLI::Range(0, 100));
  app.add_option("--blocks", blocks, "blocks per transfer (of 16 positions)")->check(CLI::Range(1, 256));
  std::string folder = "/tmp/tokenhost-bench-kv";
  app.add_option("--folder", folder, "kv_connector.disk's folder (emptied first and after)");
  std::string protocol = "eager";
  app.add_option("--protocol", protocol, "kv_connector.ucx's protocol setting (eager, rendezvous, auto)");
  CLI11_PARSE(app, argc, argv);

  std::mt19937_64 rng(1);
  Loopback tcp;
  std::filesystem::remove_all(folder);
  PluginCatalog catalog({TOKENHOST_PLUGIN_BUILD_DIR});
  catalog.scan();
  Connector disk(catalog, "kv_connector.disk", toml::table{{"folder", folder}, {"max_bytes", int64_t(1) << 40}});
  const std::string sm_port = std::to_string(free_port()), tcp_port = std::to_string(free_port());
  Connector sm_to(catalog, "kv_connector.ucx", toml::table{{"tls", "tcp,sm"}, {"listen", "127.0.0.1:" + sm_port}, {"max_bytes", int64_t(96) << 20}, {"protocol", protocol}});
  Connector sm_from(catalog, "kv_connector.ucx", toml::table{{"tls", "tcp,sm"}, {"peers", "127.0.0.1:" + sm_port}, {"protocol", protocol}});
  Connector tcp_to(catalog, "kv_connector.ucx", toml::table{{"tls", "tcp"}, {"listen", "127.0.0.1:" + tcp_port}, {"max_bytes", int64_t(96) << 20}, {"protocol", protocol}});
  Connector tcp_from(catalog, "kv_connector.ucx", toml::table{{"tls", "tcp"}, {"peers", "127.0.0.1:" + tcp_port}, {"protocol", protocol}});
  auto post = std::make_shared<Post>();
  Connector actor_to(catalog, "kv_connector.actor", toml::table{{"max_bytes", int64_t(96) << 20}}, post, "decode");
  Connector actor_from(catalog, "kv_connector.actor", toml::table{{"peers", "decode"}}, post, "prefill");
  const char* ways[] = {"memcpy", "save", "load", "tcp", "disk>", "disk<", "ucx-sm>", "ucx-tcp>", "ucx<", "actor>"};
  std::printf("%-6s %-5s %7s", "model", "dtype", "MB");
  for (const char* w : ways) std::printf(" %8s", w);
  std::printf("\n");
  for (const Shape& shape : {Shape{"110M", 12, 12, 64}, Shape{"1.1B", 22, 4, 64}})
    for (th_dtype dtype : {TH_DTYPE_F16, TH_DTYPE_Q8_0}) {
      sdk::KvBlockShape s{16, shape.n_layers, shape.n_kv_heads, shape.head_dim, dtype,
                          dtype == TH_DTYPE_Q8_0 ? sdk::kv_q8_group(shape.head_dim) : 0};
      Pool pool(s, 256, rng);
      const size_t image = sdk::kv_block_image_bytes(s), bytes = image * blocks;
      std::vector<char> images(bytes), copy(bytes);
      std::vector<int32_t> picks(blocks);
      std::vector<std::vector<double>> gbs(std::size(ways));
      for (int r = -warmup; r < runs; ++r) {
        for (auto& b : picks) b = int32_t(rng() % 256);
        auto time = [&](auto&& fn) {
          const auto t0 = Clock::now();
          fn();
          return double(bytes) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
        };
        gbs[1].push_back(time([&] {
          for (uint32_t i = 0; i < blocks; ++i) sdk::save_kv_block(pool.kv, picks[i], images.data() + i * image);
        }));
        gbs[0].push_back(time([&] { std::memcpy(copy.data(), images.data(), bytes); }));
        gbs[3].push_back(time([&] { tcp.transfer(images.data(), bytes); }));
        gbs[2].push_back(time([&] {
          for (uint32_t i = 0; i < blocks; ++i) sdk::load_kv_block(pool.kv, picks[(i + 1) % blocks], images.data() + i * image);
        }));
        std::vector<uint64_t> keys(blocks);
        std::vector<int32_t> others(blocks);
        for (uint32_t i = 0; i < blocks; ++i) others[i] = picks[(i + 1) % blocks];
        const uint64_t ns = rng();
        for (auto& k : keys) k = rng();
        gbs[4].push_back(time([&] { disk.transfer(false, ns, keys, picks, pool.kv); }));
        gbs[6].push_back(time([&] { sm_from.transfer(false, ns, keys, picks, pool.kv); }));
        gbs[5].push_back(time([&] { disk.transfer(true, ns, keys, others, pool.kv); }));
        gbs[8].push_back(time([&] { sm_to.transfer(true, ns, keys, others, pool.kv); }));
        gbs[7].push_back(time([&] { tcp_from.transfer(false, ns, keys, picks, pool.kv); }));
        gbs[9].push_back(time([&] { actor_from.transfer(false, ns, keys, picks, pool.kv); }));
      }
      for (auto& g : gbs) g.erase(g.begin(), g.begin() + warmup);  // the warm-up runs' figures
      std::printf("%-6s %-5s %7.1f", shape.name, sdk::dtype_name(dtype).c_str(), double(bytes) / 1e6);
      for (const auto& g : gbs) std::printf(" %8.2f", median(g));
      std::printf("\n");
    }
  std::filesystem::remove_all(folder);
  return 0;
}
