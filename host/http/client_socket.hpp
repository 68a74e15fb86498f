// Whether the client of a request that is not streamed is still there. cpp-httplib (0.11, Debian 12)
// hands a handler no socket and notices a closed connection only when it writes, and a non-streamed
// answer writes nothing until the generation is over: without this, a client that gives up keeps its
// sequence generating, and its KV blocks taken, to the end.
#pragma once

#include <string>

namespace tokenhost {

// The socket of this process connected to peer remote_addr:remote_port (as cpp-httplib's Request
// spells them: a numeric IPv4 or IPv6 address), or -1 when there is none or more than one. It looks
// through the process's open descriptors (one getpeername each): call it once per request.
int find_client_socket(const std::string& remote_addr, int remote_port);

// Whether the peer of connected socket fd has closed its side: a read would give end of file (or an
// error), not data and not "nothing yet". Does not consume anything.
bool peer_closed(int fd);

}  // namespace tokenhost
