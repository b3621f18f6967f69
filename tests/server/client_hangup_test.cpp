// ClientHangupCheck on real loopback TCP connections: it finds the server side of a connection
// by its addresses, sees a waiting client as there, and a closed or reset one as gone.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "server/client_hangup.h"

namespace fp4lm::server {
namespace {

int port_of(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  EXPECT_EQ(peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len), 0);
  return ntohs(a.sin_port);
}

// A listening socket on 127.0.0.1 and one accepted connection: `client` and its server side.
struct Connection {
  int listener = -1, client = -1, server = -1;
  Connection() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(listener, 4), 0);
    socklen_t len = sizeof(a);
    EXPECT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len), 0);
    client = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    server = accept(listener, nullptr, nullptr);
    EXPECT_GE(server, 0);
  }
  ~Connection() {
    for (int fd : {listener, client, server})
      if (fd >= 0) close(fd);
  }
  // The client closes its socket: a FIN, or with `reset` an RST.
  void hang_up(bool reset = false) {
    if (reset) {
      const linger abort_on_close{1, 0};
      EXPECT_EQ(setsockopt(client, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close)), 0);
    }
    close(client);
    client = -1;
  }
  // The check as the HTTP handler of `server` would make it from its Request.
  ClientHangupCheck check() const {
    return ClientHangupCheck("127.0.0.1", port_of(server, false), "127.0.0.1", port_of(server, true));
  }
};

// Loopback delivers a close at once; the bound only guards against a stalled machine.
bool becomes_hung_up(const ClientHangupCheck& c) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!c.hung_up()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

TEST(ClientHangup, AWaitingClientIsThere) {
  Connection c;
  const ClientHangupCheck check = c.check();
  ASSERT_TRUE(check.found());
  EXPECT_FALSE(check.hung_up());
}

TEST(ClientHangup, AClosedOrResetClientIsGone) {
  for (bool reset : {false, true}) {
    Connection c;
    const ClientHangupCheck check = c.check();
    ASSERT_TRUE(check.found());
    c.hang_up(reset);
    EXPECT_TRUE(becomes_hung_up(check)) << "reset " << reset;
  }
}

TEST(ClientHangup, BytesSentMeanwhileAreNotAHangUpAndStayUnread) {
  Connection c;
  const ClientHangupCheck check = c.check();
  ASSERT_TRUE(check.found());
  ASSERT_EQ(send(c.client, "GET", 3, 0), 3);
  pollfd p{c.server, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 30000), 1);
  EXPECT_FALSE(check.hung_up());
  char buf[4] = {};
  EXPECT_EQ(recv(c.server, buf, sizeof(buf), 0), 3);
  EXPECT_EQ(std::string(buf, 3), "GET");
}

TEST(ClientHangup, TheConnectionIsToldApartFromItsNeighbours) {
  Connection a, b;
  const ClientHangupCheck check = a.check();
  ASSERT_TRUE(check.found());
  b.hang_up();  // another connection's client leaving is not ours
  pollfd p{b.server, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 30000), 1);  // b's end-of-file has arrived
  EXPECT_FALSE(check.hung_up());
  a.hang_up();
  EXPECT_TRUE(becomes_hung_up(check));
}

TEST(ClientHangup, AnUnknownConnectionIsNotFoundAndNeverHungUp) {
  Connection c;
  const ClientHangupCheck check("127.0.0.1", port_of(c.server, false), "127.0.0.1", 1);
  EXPECT_FALSE(check.found());
  c.hang_up();
  EXPECT_FALSE(check.hung_up());
}

}  // namespace
}  // namespace fp4lm::server
