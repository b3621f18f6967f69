#include "server/http_transport.h"

#include <strings.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <deque>
#include <map>
#include <set>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"

namespace fp4lm::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

namespace {

class Connection;

constexpr size_t kReadSlack = 256 * 1024;

// What a connection is doing; only idle and head (no request taken yet) may be evicted.
enum class Phase { idle, head, body, busy, closing };

class ExchangeImpl;

}  // namespace

struct HttpTransport::Impl {
  Impl(TransportLimits l, TransportHandlers h) : limits(l), handlers(std::move(h)) {}
  TransportLimits limits;
  TransportHandlers handlers;
  asio::io_context ioc{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_retry{ioc};
  std::thread thread;
  std::set<Connection*> live;              // event loop only
  std::map<std::string, size_t> per_ip;   // event loop only
  std::atomic<size_t> count{0};
  Clock::time_point last_refusal_log{};

  void accept_next();
  void admit(tcp::socket s);
  bool evict_one(const std::string* ip);
  void add(Connection* c, const std::string& ip);
  void remove(Connection* c, const std::string& ip);
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpTransport::Impl& t, tcp::socket s, std::string ip, int port)
      : t_(t), sock_(std::move(s)), timer_(t.ioc), write_timer_(t.ioc), ip_(std::move(ip)), port_(port),
        buf_(t.limits.max_header_bytes + kReadSlack) {}

  void start() { wait_request(); }
  void close();
  Phase phase() const { return phase_; }
  Clock::time_point phase_since() const { return since_; }
  const std::string& ip() const { return ip_; }

  // Exchange side (event loop only).
  void respond(ExchangeImpl& ex, const HttpResponse& r);
  void start_stream(ExchangeImpl& ex, const HttpResponse& head);
  void write(ExchangeImpl& ex, std::string data);
  void end_stream(ExchangeImpl& ex);
  void client_gone();

 private:
  void set_phase(Phase p) {
    phase_ = p;
    since_ = Clock::now();
  }
  void arm(asio::steady_timer& timer, std::chrono::milliseconds d, void (Connection::*on_expiry)());
  void on_deadline() { close(); }
  void on_write_stall() { client_gone(); }
  void wait_request();
  void read_head();
  void on_head(error_code ec);
  HttpRequest head_of_parser() const;
  void read_body(HttpRequest head);
  void read_body_some();
  void on_body_timer() { body_timed_out_ = true, sock_.cancel(); }
  void on_body(error_code ec, HttpRequest head);
  void dispatch(HttpRequest req);
  void watch_hangup();
  void refuse(const HttpRequest* head, int status, const std::string& why);
  void enqueue(std::string bytes);
  void do_write();
  void after_answer();
  void linger_close();
  void linger_read();

  HttpTransport::Impl& t_;
  tcp::socket sock_;
  asio::steady_timer timer_, write_timer_;
  std::string ip_;
  int port_;
  Phase phase_ = Phase::idle;
  Clock::time_point since_ = Clock::now();
  bool open_ = true;
  // A whole head fits, plus one read's worth of what follows it (body bytes, a pipelined request).
  beast::flat_buffer buf_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::shared_ptr<ExchangeImpl> current_;
  std::deque<std::string> outq_;
  size_t out_bytes_ = 0;
  bool writing_ = false;
  bool answered_ = false;  // the whole answer is queued
  bool keep_alive_ = false;
  std::array<char, 4096> discard_{};
  size_t discarded_ = 0;
  // Reading a body: its head, when the whole body is due, whether a timer cut the read.
  HttpRequest body_head_;
  Clock::time_point body_deadline_{};
  bool body_timed_out_ = false;
};


class ExchangeImpl : public Exchange, public std::enable_shared_from_this<ExchangeImpl> {
 public:
  ExchangeImpl(asio::io_context& ioc, std::shared_ptr<Connection> c, HttpRequest req)
      : ioc_(ioc), conn_(std::move(c)), req_(std::move(req)) {}
  const HttpRequest& request() const override { return req_; }
  void respond(HttpResponse r) override {
    run([r = std::move(r)](ExchangeImpl& ex, Connection& c) { c.respond(ex, r); });
  }
  void start_stream(HttpResponse head) override {
    run([h = std::move(head)](ExchangeImpl& ex, Connection& c) { c.start_stream(ex, h); });
  }
  void write(std::string data) override {
    run([d = std::move(data)](ExchangeImpl& ex, Connection& c) mutable { c.write(ex, std::move(d)); });
  }
  void end_stream() override {
    run([](ExchangeImpl& ex, Connection& c) { c.end_stream(ex); });
  }
  void on_gone(std::function<void()> fn) override {
    asio::post(ioc_, [self = shared_from_this(), fn = std::move(fn)]() mutable {
      if (self->gone_) return fn();
      if (!self->done_) self->gone_fn_ = std::move(fn);
    });
  }
  void post(std::function<void()> fn) override { asio::post(ioc_, std::move(fn)); }
  void after(std::chrono::milliseconds delay, std::function<void()> fn) override {
    auto timer = std::make_shared<asio::steady_timer>(ioc_, delay);
    timer->async_wait([timer, fn = std::move(fn)](error_code ec) {
      if (!ec) fn();
    });
  }
  bool gone() const override { return gone_; }

  // Event loop only. The client went away before the answer ended: tell the application once,
  // and drop the connection (the cycle exchange <-> connection ends here or at done()).
  void mark_gone() {
    if (gone_ || done_) return;
    gone_ = true;
    conn_.reset();
    if (auto fn = std::move(gone_fn_)) fn();
  }
  // The answer is wholly queued.
  void done() {
    done_ = true;
    conn_.reset();
    gone_fn_ = nullptr;
  }
  bool chunked() const { return req_.version == 11; }

 private:
  template <typename F>
  void run(F f) {
    asio::post(ioc_, [self = shared_from_this(), f = std::move(f)]() mutable {
      if (!self->conn_) return;  // answered already, or the client is gone
      auto conn = self->conn_;
      f(*self, *conn);
    });
  }
  asio::io_context& ioc_;
  std::shared_ptr<Connection> conn_;
  HttpRequest req_;
  std::function<void()> gone_fn_;
  bool done_ = false, gone_ = false;
};

void Connection::arm(asio::steady_timer& timer, std::chrono::milliseconds d, void (Connection::*on_expiry)()) {
  timer.expires_after(d);
  timer.async_wait([self = shared_from_this(), on_expiry](error_code ec) {
    if (!ec && self->open_) ((*self).*on_expiry)();
  });
}

// Between requests: a pipelined request already buffered is read at once; otherwise the client
// has keep_alive_timeout to start the next one.
void Connection::wait_request() {
  current_.reset();
  answered_ = false;
  set_phase(Phase::idle);
  if (buf_.size() > 0) return read_head();
  arm(timer_, t_.limits.keep_alive_timeout, &Connection::on_deadline);
  sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
    if (ec || !self->open_) return;
    self->read_head();
  });
}

void Connection::read_head() {
  set_phase(Phase::head);
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(t_.limits.max_header_bytes));
  parser_->body_limit(t_.limits.max_body_bytes);
  arm(timer_, t_.limits.header_timeout, &Connection::on_deadline);
  bhttp::async_read_header(sock_, buf_, *parser_,
                           [self = shared_from_this()](error_code ec, size_t) { self->on_head(ec); });
}

HttpRequest Connection::head_of_parser() const {
  const auto& m = parser_->get();
  HttpRequest h;
  h.method = std::string(m.method_string());
  h.target = std::string(m.target());
  h.path = target_path(h.target);
  h.version = static_cast<int>(m.version());
  for (const auto& f : m) h.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  h.keep_alive = parser_->keep_alive();
  h.remote_addr = ip_;
  h.remote_port = port_;
  return h;
}

void Connection::on_head(error_code ec) {
  timer_.cancel();
  if (!open_) return;
  if (ec == bhttp::error::header_limit)
    return refuse(nullptr, 431, fmt::format("request head larger than {} bytes", t_.limits.max_header_bytes));
  if (ec == bhttp::error::body_limit) {  // Content-Length says so: refused before a byte of the body
    HttpRequest head = head_of_parser();
    return refuse(&head, 413, fmt::format("request body larger than {} bytes", t_.limits.max_body_bytes));
  }
  if (ec == bhttp::error::bad_version) return refuse(nullptr, 505, "only HTTP/1.0 and HTTP/1.1 are served");
  if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::operation_aborted ||
      ec == asio::error::connection_reset || ec == bhttp::error::partial_message || ec == asio::error::bad_descriptor)
    return close();
  if (ec) return refuse(nullptr, 400, "malformed request head: " + ec.message());
  HttpRequest head = head_of_parser();
  if (const auto bad = check_request_head(head, {t_.limits.max_line_bytes})) return refuse(&head, bad->status, bad->message);
  if (t_.handlers.on_head) {
    if (auto early = t_.handlers.on_head(head)) {
      // Refused before its body: keep the connection only when there is no body to skip.
      keep_alive_ = head.keep_alive && parser_->is_done();
      set_phase(Phase::busy);
      answered_ = true;
      enqueue(serialize_response(*early, keep_alive_, head.method == "HEAD"));
      return;
    }
  }
  if (parser_->is_done()) return dispatch(std::move(head));
  const std::string* expect = head.header("Expect");
  if (expect && head.version == 11 && expect->size() == 12 && ::strncasecmp(expect->c_str(), "100-continue", 12) == 0)
    enqueue("HTTP/1.1 100 Continue\r\n\r\n");
  read_body(std::move(head));
}

// The body is read piece by piece: the client has body_timeout for all of it and at most
// body_silence_timeout between two pieces (a body that stops short of its Content-Length is
// answered 408 then, not held until the whole deadline).
void Connection::read_body(HttpRequest head) {
  set_phase(Phase::body);
  body_head_ = std::move(head);
  body_deadline_ = Clock::now() + t_.limits.body_timeout;
  body_timed_out_ = false;
  read_body_some();
}

void Connection::read_body_some() {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(body_deadline_ - Clock::now());
  arm(timer_, std::max(std::chrono::milliseconds(0), std::min(left, t_.limits.body_silence_timeout)),
      &Connection::on_body_timer);
  bhttp::async_read_some(sock_, buf_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
    self->timer_.cancel();
    if (!self->open_) return;
    if (!ec && !self->body_timed_out_ && !self->parser_->is_done()) return self->read_body_some();
    self->on_body(ec, std::move(self->body_head_));
  });
}

void Connection::on_body(error_code ec, HttpRequest head) {
  timer_.cancel();
  if (!open_) return;
  if (body_timed_out_) {
    const bool silent = Clock::now() < body_deadline_;
    return refuse(&head, 408,
                  silent ? fmt::format("request body: no byte for {} ms before its end (Content-Length or chunks "
                                       "promised more)",
                                       t_.limits.body_silence_timeout.count())
                         : fmt::format("request body not complete within {} ms", t_.limits.body_timeout.count()));
  }
  if (ec == bhttp::error::body_limit)
    return refuse(&head, 413, fmt::format("request body larger than {} bytes", t_.limits.max_body_bytes));
  if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == asio::error::operation_aborted ||
      ec == asio::error::connection_reset || ec == bhttp::error::partial_message)
    return close();
  if (ec) return refuse(&head, 400, "malformed request body: " + ec.message());
  head.body = std::move(parser_->get().body());
  dispatch(std::move(head));
}

void Connection::dispatch(HttpRequest req) {
  set_phase(Phase::busy);
  keep_alive_ = req.keep_alive;
  parser_.reset();
  current_ = std::make_shared<ExchangeImpl>(t_.ioc, shared_from_this(), std::move(req));
  watch_hangup();
  t_.handlers.on_request(current_);
}

// While a request runs, the socket is watched for the client's hang-up (end of file or reset),
// so a generation nobody will read is cancelled. Bytes that arrive instead (a pipelined request)
// stay unread and end the watch.
void Connection::watch_hangup() {
  sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), ex = current_](error_code ec) {
    if (ec || !self->open_ || self->current_ != ex || self->answered_) return;
    char c;
    const ssize_t n = ::recv(self->sock_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return self->watch_hangup();
    self->client_gone();
  });
}

void Connection::refuse(const HttpRequest* head, int status, const std::string& why) {
  HttpRequest unknown;
  unknown.remote_addr = ip_;
  unknown.remote_port = port_;
  if (t_.handlers.on_refused) t_.handlers.on_refused(head ? *head : unknown, status, why);
  HttpResponse r = t_.handlers.error_response(status, why);
  set_phase(Phase::busy);
  keep_alive_ = false;
  answered_ = true;
  enqueue(serialize_response(r, false));
}

void Connection::respond(ExchangeImpl& ex, const HttpResponse& r) {
  keep_alive_ = keep_alive_ && sock_.is_open();
  answered_ = true;
  ex.done();
  enqueue(serialize_response(r, keep_alive_, ex.request().method == "HEAD"));
}

void Connection::start_stream(ExchangeImpl& ex, const HttpResponse& head) {
  if (!ex.chunked()) keep_alive_ = false;  // HTTP/1.0: the end of the stream is the close
  enqueue(serialize_stream_head(head, ex.chunked()));
}

void Connection::write(ExchangeImpl& ex, std::string data) {
  enqueue(ex.chunked() ? chunk(data) : std::move(data));
  if (out_bytes_ > t_.limits.max_stream_backlog_bytes) {
    log().warn("{}:{}: client reads too slowly ({} bytes unsent); closing", ip_, port_, out_bytes_);
    client_gone();
  }
}

void Connection::end_stream(ExchangeImpl& ex) {
  answered_ = true;
  const bool chunked = ex.chunked();
  ex.done();
  if (chunked) enqueue(last_chunk());
  else if (!writing_) after_answer();
}

void Connection::client_gone() {
  if (current_) current_->mark_gone();
  close();
}

void Connection::enqueue(std::string bytes) {
  if (!open_) return;
  if (!bytes.empty()) {
    out_bytes_ += bytes.size();
    outq_.push_back(std::move(bytes));
  }
  if (!writing_) do_write();
}

void Connection::do_write() {
  if (outq_.empty()) {
    if (answered_) after_answer();
    return;
  }
  writing_ = true;
  arm(write_timer_, t_.limits.write_timeout, &Connection::on_write_stall);
  asio::async_write(sock_, asio::buffer(outq_.front()), [self = shared_from_this()](error_code ec, size_t) {
    self->write_timer_.cancel();
    self->writing_ = false;
    if (!self->open_) return;
    if (ec) return self->client_gone();
    self->out_bytes_ -= self->outq_.front().size();
    self->outq_.pop_front();
    self->do_write();
  });
}

// The answer is out: the next request, or a graceful close.
void Connection::after_answer() {
  if (!open_ || phase_ == Phase::closing) return;
  if (keep_alive_) {
    sock_.cancel();  // ends the hang-up watch
    return wait_request();
  }
  linger_close();
}

// Closing with unread bytes would reset the connection and could destroy the response before the
// client reads it: stop sending, read and drop what comes (bounded in bytes and time), then close.
void Connection::linger_close() {
  set_phase(Phase::closing);
  current_.reset();
  error_code ec;
  sock_.shutdown(tcp::socket::shutdown_send, ec);
  sock_.cancel(ec);
  arm(timer_, std::chrono::milliseconds(2000), &Connection::on_deadline);
  linger_read();
}

void Connection::linger_read() {
  sock_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](error_code e, size_t n) {
    if (!self->open_) return;
    self->discarded_ += n;
    if (e || self->discarded_ > (1u << 20)) return self->close();
    self->linger_read();
  });
}

void Connection::close() {
  if (!open_) return;
  open_ = false;
  if (current_) current_->mark_gone();
  current_.reset();
  timer_.cancel();
  write_timer_.cancel();
  error_code ec;
  sock_.close(ec);
  t_.remove(this, ip_);
}

}  // namespace

void HttpTransport::Impl::add(Connection* c, const std::string& ip) {
  live.insert(c);
  ++per_ip[ip];
  count = live.size();
}

void HttpTransport::Impl::remove(Connection* c, const std::string& ip) {
  if (live.erase(c) == 0) return;
  if (auto it = per_ip.find(ip); it != per_ip.end() && --it->second == 0) per_ip.erase(it);
  count = live.size();
}

// Closes the connection (of `ip`, or any) that has waited longest without a request in progress.
bool HttpTransport::Impl::evict_one(const std::string* ip) {
  Connection* oldest = nullptr;
  for (Connection* c : live) {
    if (c->phase() != Phase::idle && c->phase() != Phase::head) continue;
    if (ip && c->ip() != *ip) continue;
    if (!oldest || c->phase_since() < oldest->phase_since()) oldest = c;
  }
  if (!oldest) return false;
  oldest->close();
  return true;
}

void HttpTransport::Impl::admit(tcp::socket s) {
  error_code ec;
  const tcp::endpoint peer = s.remote_endpoint(ec);
  if (ec) return;
  s.set_option(tcp::no_delay(true), ec);
  std::string ip = peer.address().to_string();
  const bool over_total = live.size() >= limits.max_connections && !evict_one(nullptr);
  const auto it = per_ip.find(ip);
  const bool over_ip = !over_total && it != per_ip.end() && it->second >= limits.max_connections_per_ip &&
                       !evict_one(&ip);
  if (over_total || over_ip) {
    // Every connection is busy with a request: refuse this one at once (no thread, no linger).
    const std::string why = over_total ? "too many connections" : "too many connections from this address";
    const std::string bytes = serialize_response(handlers.error_response(503, why), false);
    ::send(s.native_handle(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    s.shutdown(tcp::socket::shutdown_both, ec);
    s.close(ec);
    if (Clock::now() - last_refusal_log > std::chrono::seconds(1)) {  // a flood must not flood the log
      last_refusal_log = Clock::now();
      log().warn("{}: connection refused ({}; logged at most once a second)", ip, why);
    }
    return;
  }
  auto c = std::make_shared<Connection>(*this, std::move(s), ip, peer.port());
  add(c.get(), ip);
  c->start();
}

void HttpTransport::Impl::accept_next() {
  acceptor.async_accept([this](error_code ec, tcp::socket s) {
    if (!acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors or similar: wait a little instead of spinning.
      log().warn("accept: {}", ec.message());
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](error_code e) {
        if (!e) accept_next();
      });
      return;
    }
    admit(std::move(s));
    accept_next();
  });
}

HttpTransport::HttpTransport(TransportLimits limits, TransportHandlers handlers)
    : impl_(std::make_unique<Impl>(limits, std::move(handlers))) {}

HttpTransport::~HttpTransport() { stop(); }

int HttpTransport::bind(const std::string& host, int port) {
  error_code ec;
  const auto addr = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) fail("serve: cannot bind {}: not a numeric IP address ({})", host, ec.message());
  const tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("serve: cannot bind {}:{} ({}: in use, or not an address of this machine)", host, port, ec.message());
  return a.local_endpoint().port();
}

void HttpTransport::start() {
  impl_->accept_next();
  impl_->thread = std::thread([this] { impl_->ioc.run(); });
}

void HttpTransport::stop() {
  if (!impl_->thread.joinable()) return;
  asio::post(impl_->ioc, [this] {
    error_code ec;
    impl_->acceptor.close(ec);
    impl_->accept_retry.cancel();
    const std::set<Connection*> all = impl_->live;
    for (Connection* c : all) c->close();
    impl_->ioc.stop();
  });
  impl_->thread.join();
}

size_t HttpTransport::connections() const { return impl_->count.load(); }

}  // namespace fp4lm::server
