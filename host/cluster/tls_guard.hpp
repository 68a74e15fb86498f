// The process's guards around CAF's OpenSSL module (0.17.6, as Debian packages it), which cannot be
// changed: this process defines SSL_read, SSL_write, SSL_connect, SSL_accept and SSL_free itself
// (tls_guard.cpp), each calling OpenSSL's own; the dynamic linker resolves the module's calls to the
// executable's definitions first. They close three of the module's traps (shared/STACK.md):
//
// - OpenSSL keeps one error queue per thread and SSL_get_error() reads it: an error left there by one
//   connection makes the next read of any other look failed, and the module never empties it, so a
//   single refused handshake (a stranger, garbage bytes) or a dead peer would close every healthy
//   link on the middleman's thread, and the peers' other links with them. Each wrapper empties the
//   calling thread's queue first, as OpenSSL asks.
// - The module logs no refused handshake (its peer sees only disconnect_during_handshake). A TLS call
//   that fails before the handshake finished is logged once per connection, with the peer's address
//   and OpenSSL's reason; at most kLoggedPerWindow lines per 10 s, the rest counted.
// - A TCP connection that sends nothing keeps the middleman's thread spinning (the module polls it for
//   writing until its handshake ends). A watchdog thread shuts down the socket of a handshake older
//   than kHandshakeDeadline, and of the oldest past kMaxPendingHandshakes: the module then reads the
//   end and closes it.
#pragma once

#include <chrono>
#include <cstddef>

namespace tokenhost::cluster {

constexpr std::chrono::milliseconds kHandshakeDeadline{2000};
constexpr size_t kMaxPendingHandshakes = 64;
constexpr int kLoggedPerWindow = 10;

// Whether the module's TLS calls reach these wrappers (the executable exports them and the dynamic
// linker took them): a TLS node refuses to run without it (cluster/transport.cpp).
bool tls_guarded();

}  // namespace tokenhost::cluster
