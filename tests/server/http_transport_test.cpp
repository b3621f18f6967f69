// The event-driven transport on real loopback connections: a waiting client is there, a closed
// or reset one is seen as gone (and only that connection), bytes sent meanwhile (a pipelined
// request) are not a hang-up and are answered in order after the first, and the connection caps
// make room by closing the longest-idle connection.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/http_transport.h"

namespace fp4lm::server::http_transport_test {
namespace {

using namespace std::chrono_literals;

// A transport whose requests wait until the test answers them.
struct Harness {
  std::mutex mu;
  std::vector<std::shared_ptr<Exchange>> pending;
  std::vector<std::shared_ptr<std::promise<void>>> gone;
  std::promise<void> first_request;
  bool got_first = false;
  std::unique_ptr<HttpTransport> t;
  int port = 0;

  explicit Harness(TransportLimits limits = {}) {
    TransportHandlers h;
    h.on_head = [](const HttpRequest&) { return std::optional<HttpResponse>(); };
    h.on_request = [this](std::shared_ptr<Exchange> ex) {
      if (ex->request().path == "/now") return ex->respond(HttpResponse{200, "text/plain", {}, "now"});
      auto p = std::make_shared<std::promise<void>>();
      ex->on_gone([p] { p->set_value(); });
      std::lock_guard lk(mu);
      pending.push_back(ex);
      gone.push_back(p);
      if (!got_first) {
        got_first = true;
        first_request.set_value();
      }
    };
    h.error_response = [](int status, const std::string& m) { return HttpResponse{status, "text/plain", {}, m}; };
    t = std::make_unique<HttpTransport>(limits, h);
    port = t->bind("127.0.0.1", 0);
    t->start();
  }
  // The exchanges (and the sockets they hold) must go before the event loop they belong to.
  ~Harness() {
    {
      std::lock_guard lk(mu);
      pending.clear();
    }
    t->stop();
    t.reset();
  }

  size_t count() {
    std::lock_guard lk(mu);
    return pending.size();
  }
};

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void send_all(int fd, const std::string& s) { ASSERT_EQ(send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size())); }

// Everything the server sends until it has sent `n` bodies ending in `until` (or closes).
std::string read_until(int fd, const std::string& until, int n = 1) {
  std::string got;
  char buf[4096];
  int seen = 0;
  while (seen < n) {
    const ssize_t k = recv(fd, buf, sizeof(buf), 0);
    if (k <= 0) break;
    got.append(buf, static_cast<size_t>(k));
    seen = 0;
    for (size_t p = got.find(until); p != std::string::npos; p = got.find(until, p + 1)) ++seen;
  }
  return got;
}

void hang_up(int fd, bool reset) {
  if (reset) {
    const linger abort_on_close{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close));
  }
  close(fd);
}

bool wait_until(const std::function<bool()>& cond) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;  // loopback is immediate; this only bounds
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

const std::string kGet = "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n";

TEST(HttpTransport, AClosedOrResetClientIsGoneAndAWaitingOneIsNot) {
  for (bool reset : {false, true}) {
    Harness h;
    const int waiting = connect_to(h.port), leaving = connect_to(h.port);
    send_all(waiting, kGet);
    ASSERT_TRUE(wait_until([&] { return h.count() == 1; }));
    send_all(leaving, kGet);
    ASSERT_TRUE(wait_until([&] { return h.count() == 2; }));
    hang_up(leaving, reset);
    EXPECT_EQ(h.gone[1]->get_future().wait_for(30s), std::future_status::ready) << "reset " << reset;
    EXPECT_EQ(h.gone[0]->get_future().wait_for(0s), std::future_status::timeout);  // the neighbour stays
    h.pending[0]->respond(HttpResponse{200, "text/plain", {}, "done"});
    EXPECT_NE(read_until(waiting, "done").find("HTTP/1.1 200 OK"), std::string::npos);
    close(waiting);
  }
}

TEST(HttpTransport, PipelinedBytesAreNoHangUpAndAreAnsweredInOrder) {
  Harness h;
  const int fd = connect_to(h.port);
  send_all(fd, kGet);
  ASSERT_TRUE(wait_until([&] { return h.count() == 1; }));
  send_all(fd, "GET /now HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(h.gone[0]->get_future().wait_for(0s), std::future_status::timeout);
  h.pending[0]->respond(HttpResponse{200, "text/plain", {}, "first"});
  const std::string got = read_until(fd, "now");
  ASSERT_NE(got.find("first"), std::string::npos);
  EXPECT_LT(got.find("first"), got.find("now"));
  close(fd);
}

TEST(HttpTransport, AStreamIsChunkedOnHttp11AndCloseDelimitedOnHttp10) {
  Harness h;
  const int a = connect_to(h.port), b = connect_to(h.port);
  send_all(a, kGet);
  ASSERT_TRUE(wait_until([&] { return h.count() == 1; }));
  send_all(b, "GET /wait HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(wait_until([&] { return h.count() == 2; }));
  for (auto& ex : h.pending) {
    ex->start_stream(HttpResponse{200, "text/event-stream", {}, ""});
    ex->write("data: 1\n\n");
    ex->end_stream();
  }
  const std::string chunked = read_until(a, "0\r\n\r\n");
  EXPECT_NE(chunked.find("Transfer-Encoding: chunked\r\n"), std::string::npos);
  EXPECT_NE(chunked.find("9\r\ndata: 1\n\n\r\n0\r\n\r\n"), std::string::npos);
  const std::string plain = read_until(b, "never");  // to the close
  EXPECT_EQ(plain.find("Transfer-Encoding"), std::string::npos);
  EXPECT_NE(plain.find("Connection: close\r\n\r\ndata: 1\n\n"), std::string::npos);
  EXPECT_EQ(plain.substr(plain.size() - 9), "data: 1\n\n");
  close(a);
  close(b);
}

TEST(HttpTransport, AtTheCapTheLongestIdleConnectionMakesRoom) {
  TransportLimits l;
  l.max_connections = 4;
  Harness h(l);
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(connect_to(h.port));
  ASSERT_TRUE(wait_until([&] { return h.t->connections() == 4; }));
  const int fresh = connect_to(h.port);
  send_all(fresh, "GET /now HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(read_until(fresh, "now").find("200 OK"), std::string::npos);
  char c;
  EXPECT_EQ(recv(idle[0], &c, 1, 0), 0);  // the oldest idle one was closed
  EXPECT_LE(h.t->connections(), 4u);
  for (int fd : idle) close(fd);
  close(fresh);
}

TEST(HttpTransport, BusyConnectionsAreNeverEvictedAndANewOneGets503) {
  TransportLimits l;
  l.max_connections = 2;
  Harness h(l);
  const int a = connect_to(h.port), b = connect_to(h.port);
  send_all(a, kGet);
  send_all(b, kGet);
  ASSERT_TRUE(wait_until([&] { return h.count() == 2; }));
  const int c = connect_to(h.port);
  EXPECT_NE(read_until(c, "connections").find("HTTP/1.1 503"), std::string::npos);
  EXPECT_EQ(h.gone[0]->get_future().wait_for(0s), std::future_status::timeout);
  close(a);
  close(b);
  close(c);
}

}  // namespace
}  // namespace fp4lm::server::http_transport_test
