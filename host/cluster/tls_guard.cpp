#include "cluster/tls_guard.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include <spdlog/spdlog.h>

namespace {

using tokenhost::cluster::kHandshakeDeadline;
using tokenhost::cluster::kLoggedPerWindow;
using tokenhost::cluster::kMaxPendingHandshakes;
using steady = std::chrono::steady_clock;

// OpenSSL's own function of that name: the next definition after this executable's.
template <class F>
F next_definition(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (!f) {
    // Without OpenSSL's definition there is nothing to call: the process cannot do TLS at all.
    std::fprintf(stderr, "tokenhost: OpenSSL's %s is not loaded: %s\n", name, dlerror());
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

struct Peer {
  sockaddr_storage addr{};
  socklen_t len = 0;
};

Peer peer_of(int fd) {
  Peer p;
  p.len = sizeof p.addr;
  if (fd < 0 || getpeername(fd, reinterpret_cast<sockaddr*>(&p.addr), &p.len) != 0) p.len = 0;
  return p;
}

std::string describe(const Peer& p) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (p.len == 0) return "a peer";
  if (p.addr.ss_family == AF_INET) {
    auto* v4 = reinterpret_cast<const sockaddr_in*>(&p.addr);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    port = ntohs(v4->sin_port);
  } else if (p.addr.ss_family == AF_INET6) {
    auto* v6 = reinterpret_cast<const sockaddr_in6*>(&p.addr);
    inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
    port = ntohs(v6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

// What a connection's SSL carries for the guards (its ex_data slot, made on its first handshake call
// and freed with the SSL; touched on the connection's own thread only): its peer's address as it was
// when the handshake began (a refused peer may be gone by the time it is logged), whether its refusal
// was logged, whether it entered the handshake table (it may have left since).
struct Conn {
  Peer peer;
  bool logged = false, pending = false;
};

int conn_index() {
  static const int index = SSL_get_ex_new_index(
      0, nullptr, nullptr, nullptr, [](void*, void* p, CRYPTO_EX_DATA*, int, long, void*) { delete static_cast<Conn*>(p); });
  return index;
}
Conn* conn_of(SSL* ssl) { return static_cast<Conn*>(SSL_get_ex_data(ssl, conn_index())); }
// On a handshake call: the connection's record, made on the first.
Conn* begin_conn(SSL* ssl) {
  if (Conn* c = conn_of(ssl)) return c;
  auto* c = new Conn{peer_of(SSL_get_fd(ssl))};
  SSL_set_ex_data(ssl, conn_index(), c);
  return c;
}

// At most kLoggedPerWindow lines per window; the rest counted, and the count logged when the next
// window opens with a refusal.
bool may_log() {
  constexpr int64_t kWindowS = 10;
  static std::atomic<int64_t> window_start{INT64_MIN};
  static std::atomic<int> logged{0}, suppressed{0};
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(steady::now().time_since_epoch()).count();
  int64_t start = window_start.load();
  if (now - start >= kWindowS && window_start.compare_exchange_strong(start, now)) {
    if (const int n = suppressed.exchange(0); n > 0) spdlog::warn("cluster: {} more TLS handshake(s) refused in the last {} s", n, kWindowS);
    logged = 0;
  }
  if (logged.fetch_add(1) < kLoggedPerWindow) return true;
  ++suppressed;
  return false;
}

void log_refused_handshake(SSL* ssl, int ret) {
  if (ret > 0 || SSL_is_init_finished(ssl)) return;
  Conn* c = conn_of(ssl);
  if (c != nullptr && c->logged) return;
  const int kind = SSL_get_error(ssl, ret);
  if (kind == SSL_ERROR_WANT_READ || kind == SSL_ERROR_WANT_WRITE) return;
  if (c != nullptr) c->logged = true;
  if (!may_log()) return;
  std::string why;
  if (const long v = SSL_get_verify_result(ssl); v != X509_V_OK) why = std::string("its certificate: ") + X509_verify_cert_error_string(v);
  if (why.empty()) {
    if (const unsigned long e = ERR_peek_error(); e != 0) {
      char buf[256];
      ERR_error_string_n(e, buf, sizeof buf);
      why = buf;
    } else {
      why = "the connection closed during the handshake";
    }
  }
  spdlog::warn("cluster: refused a TLS handshake with {} ({}): {}", describe(c != nullptr ? c->peer : peer_of(SSL_get_fd(ssl))),
               SSL_is_server(ssl) ? "incoming" : "outgoing", why);
}

// Handshakes under way, for the watchdog. An entry leaves when its handshake ends (a wrapped call
// finds it finished), when its SSL is freed, or when the watchdog shuts its socket down.
struct Pending {
  int fd;
  Peer peer;
  steady::time_point since;
  bool incoming;
};

struct Handshakes {
  std::mutex mutex;
  std::condition_variable changed;
  std::unordered_map<SSL*, Pending> pending;
};

Handshakes& handshakes() {
  static Handshakes* h = new Handshakes;  // never destroyed: the watchdog may outlive static destruction
  return *h;
}

// Shuts the connection's socket down if it is still the one the handshake began on (the same peer
// address: the descriptor may have been closed and its number reused).
void shut(const Pending& p, const char* why) {
  const Peer now = peer_of(p.fd);
  if (now.len != p.peer.len || std::memcmp(&now.addr, &p.peer.addr, p.peer.len) != 0) return;
  ::shutdown(p.fd, SHUT_RDWR);
  if (may_log())
    spdlog::warn("cluster: closed the {} TLS connection with {}: {}", p.incoming ? "incoming" : "outgoing", describe(p.peer), why);
}

void watchdog() {
  auto& h = handshakes();
  std::unique_lock lock(h.mutex);
  for (;;) {
    if (h.pending.empty()) {
      h.changed.wait(lock);
      continue;
    }
    const auto now = steady::now();
    for (auto it = h.pending.begin(); it != h.pending.end();) {
      if (now - it->second.since >= kHandshakeDeadline) {
        shut(it->second, ("no handshake within " + std::to_string(kHandshakeDeadline.count()) + " ms").c_str());
        it = h.pending.erase(it);
      } else {
        ++it;
      }
    }
    h.changed.wait_for(lock, std::chrono::milliseconds(100));
  }
}

// After a wrapped call on ssl: a connection whose handshake began enters the table; one whose
// handshake ended leaves it. Connections past their handshake touch no lock.
void track(SSL* ssl, Conn* begun) {
  Conn* c = begun != nullptr ? begun : conn_of(ssl);
  if (c == nullptr) return;
  const bool finished = SSL_is_init_finished(ssl);
  if (!c->pending) {
    if (begun == nullptr || finished) return;
    static std::once_flag started;
    std::call_once(started, [] { std::thread(watchdog).detach(); });
    auto& h = handshakes();
    std::lock_guard lock(h.mutex);
    if (h.pending.size() >= kMaxPendingHandshakes) {
      auto oldest = h.pending.begin();
      for (auto it = h.pending.begin(); it != h.pending.end(); ++it)
        if (it->second.since < oldest->second.since) oldest = it;
      shut(oldest->second, ("more than " + std::to_string(kMaxPendingHandshakes) + " handshakes at once; the oldest closed").c_str());
      h.pending.erase(oldest);
    }
    h.pending[ssl] = Pending{SSL_get_fd(ssl), c->peer, steady::now(), bool(SSL_is_server(ssl))};
    c->pending = true;
    h.changed.notify_one();
    return;
  }
  if (!finished) return;
  auto& h = handshakes();
  std::lock_guard lock(h.mutex);
  h.pending.erase(ssl);
  c->pending = false;
}

// SSL_connect or SSL_accept (real): the queue emptied, the connection recorded, a refusal logged, an
// unfinished handshake tracked.
int handshake_step(SSL* ssl, int (*real)(SSL*)) {
  ERR_clear_error();
  Conn* c = begin_conn(ssl);
  const int ret = real(ssl);
  log_refused_handshake(ssl, ret);
  track(ssl, ret <= 0 ? c : nullptr);
  return ret;
}

}  // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  const int ret = real(ssl, buf, num);
  log_refused_handshake(ssl, ret);
  track(ssl, nullptr);
  return ret;
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto real = next_definition<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  const int ret = real(ssl, buf, num);
  log_refused_handshake(ssl, ret);
  track(ssl, nullptr);
  return ret;
}

int SSL_connect(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_connect");
  return handshake_step(ssl, real);
}

int SSL_accept(SSL* ssl) {
  static const auto real = next_definition<int (*)(SSL*)>("SSL_accept");
  return handshake_step(ssl, real);
}

void SSL_free(SSL* ssl) {
  static const auto real = next_definition<void (*)(SSL*)>("SSL_free");
  if (Conn* c = ssl != nullptr ? conn_of(ssl) : nullptr; c != nullptr && c->pending) {
    auto& h = handshakes();
    std::lock_guard lock(h.mutex);
    h.pending.erase(ssl);
  }
  real(ssl);
}

}  // extern "C"

namespace tokenhost::cluster {

bool tls_guarded() {
  // What a library's call resolves to: this file's definition when the interposition took.
  return dlsym(RTLD_DEFAULT, "SSL_read") == reinterpret_cast<void*>(&SSL_read) &&
         dlsym(RTLD_DEFAULT, "SSL_free") == reinterpret_cast<void*>(&SSL_free);
}

}  // namespace tokenhost::cluster
