#include "server/client_hangup.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace fp4lm::server {

namespace {

// Whether fd's peer (or local) address is host:port, compared as cpp-httplib writes a Request's
// addresses: getnameinfo's numeric host, the port in host order.
bool address_is(int fd, bool peer, const std::string& host, int port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if ((peer ? ::getpeername(fd, sa, &len) : ::getsockname(fd, sa, &len)) != 0) return false;
  int p = -1;
  if (a.ss_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, &a, sizeof(in));
    p = ntohs(in.sin_port);
  } else if (a.ss_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, &a, sizeof(in6));
    p = ntohs(in6.sin6_port);
  } else {
    return false;
  }
  if (p != port) return false;
  char name[NI_MAXHOST];
  if (::getnameinfo(sa, len, name, sizeof(name), nullptr, 0, NI_NUMERICHOST) != 0) return false;
  return host == name;
}

}  // namespace

ClientHangupCheck::ClientHangupCheck(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                     int remote_port) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    struct stat st {};
    if (::fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    // Another thread may close a descriptor and reuse its number meanwhile; only the whole
    // address pair, unique among live connections, makes it ours.
    if (address_is(static_cast<int>(fd), true, remote_addr, remote_port) &&
        address_is(static_cast<int>(fd), false, local_addr, local_port)) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
}

bool ClientHangupCheck::hung_up() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;  // nothing to read: the client is waiting
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  char c;
  const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace fp4lm::server
