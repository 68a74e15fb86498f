// What moving KV blocks costs on this machine before any connector (issue 32): for the 110M and 1.1B
// shapes in f16 and q8_0, a transfer of 64 blocks of 16 positions (a 1,024-token prompt) four ways:
//   memcpy   the images' bytes from one buffer to another (the floor of any copy);
//   save     sdk::save_kv_block of 64 pool blocks into images (what a connector's save reads);
//   load     sdk::load_kv_block of 64 images into pool blocks (what a connector's load writes);
//   tcp      the images through one loopback TCP connection to a receiving thread.
// Blocks are picked at random from a pool of 256 laid out as the SDK's KvBlockPool lays them out. The
// ways alternate within each run; GB/s (10^9 bytes of images per second), medians of the runs.
//
//   bench_kv_transfer [--runs 5] [--blocks 64]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
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
#include <tokenhost/plugin_kv_blocks.hpp>

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"What moving KV blocks costs: memcpy, block images saved and loaded, loopback TCP"};
  int runs = 5;
  uint32_t blocks = 64;
  app.add_option("--runs", runs, "runs (the ways alternate within each)")->check(CLI::Range(1, 100));
  app.add_option("--blocks", blocks, "blocks per transfer (of 16 positions)")->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);

  std::mt19937_64 rng(1);
  Loopback tcp;
  std::printf("%-6s %-5s %10s %10s %10s %10s %10s\n", "model", "dtype", "MB", "memcpy", "save", "load", "tcp");
  for (const Shape& shape : {Shape{"110M", 12, 12, 64}, Shape{"1.1B", 22, 4, 64}})
    for (th_dtype dtype : {TH_DTYPE_F16, TH_DTYPE_Q8_0}) {
      sdk::KvBlockShape s{16, shape.n_layers, shape.n_kv_heads, shape.head_dim, dtype,
                          dtype == TH_DTYPE_Q8_0 ? sdk::kv_q8_group(shape.head_dim) : 0};
      Pool pool(s, 256, rng);
      const size_t image = sdk::kv_block_image_bytes(s), bytes = image * blocks;
      std::vector<char> images(bytes), copy(bytes);
      std::vector<int32_t> picks(blocks);
      std::vector<std::vector<double>> gbs(4);
      for (int r = 0; r < runs; ++r) {
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
      }
      std::printf("%-6s %-5s %10.1f %10.2f %10.2f %10.2f %10.2f\n", shape.name, sdk::dtype_name(dtype).c_str(), double(bytes) / 1e6,
                  median(gbs[0]), median(gbs[1]), median(gbs[2]), median(gbs[3]));
    }
  return 0;
}
