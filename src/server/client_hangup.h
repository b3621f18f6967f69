#pragma once
// Whether the client of an HTTP request has hung up, for a handler that waits long before it
// writes anything (a non-streaming generation: a stream notices when a write fails). cpp-httplib
// 0.11 (Debian 12's) gives a handler neither its socket nor such a check (later versions have
// Request::is_connection_closed), so the socket is found once, among the process's descriptors,
// by the connection's two addresses, which httplib puts in the Request.
#include <string>

namespace fp4lm::server {

class ClientHangupCheck {
 public:
  // Finds the connected TCP socket whose local and peer addresses (numeric host as getnameinfo
  // writes it, port) are these. Use it only inside the request's handler: httplib closes the
  // socket after the handler returns.
  ClientHangupCheck(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

  // Whether the socket was found; when not, hung_up() is always false (the request runs to its end).
  bool found() const { return fd_ >= 0; }
  // True once the client has closed or reset the connection (its side reads end-of-file or an
  // error). Bytes the client sent meanwhile (a pipelined next request) stay unread; a client that
  // only shuts down its sending side after the request counts as gone, as in later cpp-httplib.
  bool hung_up() const;

 private:
  int fd_ = -1;
};

}  // namespace fp4lm::server
