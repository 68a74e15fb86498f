#include "http/client_socket.hpp"

#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace tokenhost {

int find_client_socket(const std::string& remote_addr, int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  const int own = dirfd(dir);
  int found = -1, matches = 0;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    struct stat st;
    if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;  // listening, unconnected
    if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) continue;
    // The same numeric form cpp-httplib gives Request::remote_addr / remote_port.
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<sockaddr*>(&peer), len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
      continue;
    if (remote_addr == host && remote_port == std::atoi(port)) {
      found = int(fd);
      ++matches;
    }
  }
  closedir(dir);
  return matches == 1 ? found : -1;
}

bool peer_closed(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // data (a pipelined request): still there
  if (n == 0) return true;  // end of file: the client closed the connection
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset, or the socket is gone
}

}  // namespace tokenhost
