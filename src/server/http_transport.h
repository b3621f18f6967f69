#pragma once
// The HTTP/1.1 transport: one event-loop thread (Boost.Asio, Boost.Beast's parser) owns every
// socket, so an idle or slow connection costs a socket and a few KiB, never a thread. Requests
// on a connection are answered in order (pipelining); limits are enforced while reading; the
// application sees a checked request head first (it may refuse it before the body is read) and
// then the whole request as an Exchange it answers from any thread. Boost headers stay inside
// http_transport.cpp.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/http_message.h"

namespace fp4lm::server {

struct TransportLimits {
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle before a request's first byte
  std::chrono::milliseconds header_timeout{10000};     // whole head, from its first byte
  std::chrono::milliseconds body_timeout{60000};       // whole body, from the end of the head
  std::chrono::milliseconds body_silence_timeout{10000};  // longest pause inside a body (then 408)
  std::chrono::milliseconds write_timeout{60000};      // each response write to complete
  size_t max_connections = 1024;
  size_t max_connections_per_ip = 256;
  size_t max_header_bytes = 16384;  // request line + header section
  size_t max_line_bytes = 8192;     // request target; each header line
  size_t max_body_bytes = 64u << 20;  // decoded (after chunked coding)
  size_t max_stream_backlog_bytes = 16u << 20;  // unsent streamed bytes before a client counts as stuck
};

// One request and its response. Every method may be called from any thread (they run on the
// event loop). Exactly one of respond() or start_stream() ... end_stream() answers it.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual const HttpRequest& request() const = 0;
  virtual void respond(HttpResponse r) = 0;
  // A streamed response: the head now, then data (chunked on HTTP/1.1, close-delimited on 1.0).
  virtual void start_stream(HttpResponse head) = 0;
  virtual void write(std::string data) = 0;
  virtual void end_stream() = 0;
  // `fn` runs once (on the event loop) when the client goes away before the answer ends: it
  // hung up, reset, or a write failed or stalled; at once if that happened already.
  virtual void on_gone(std::function<void()> fn) = 0;
  // Runs `fn` on the event loop (for work that must be ordered with this exchange's writes).
  virtual void post(std::function<void()> fn) = 0;
  // Runs `fn` on the event loop after `delay`.
  virtual void after(std::chrono::milliseconds delay, std::function<void()> fn) = 0;
  // Whether the client is gone (only meaningful on the event loop).
  virtual bool gone() const = 0;
};

struct TransportHandlers {
  // On the event loop, after the head passed check_request_head: a response refuses the request
  // before its body is read (the connection then closes, so the body never runs as a request).
  // Must be quick: no model work.
  std::function<std::optional<HttpResponse>(const HttpRequest& head)> on_head;
  // On the event loop, with the whole request. Hand heavy work to another thread.
  std::function<void(std::shared_ptr<Exchange>)> on_request;
  // A request refused by the transport itself (bad syntax, limits): for the access log.
  std::function<void(const HttpRequest& head, int status, const std::string& why)> on_refused;
  // Builds an error response body for a transport refusal.
  std::function<HttpResponse(int status, const std::string& message)> error_response;
};

class HttpTransport {
 public:
  HttpTransport(TransportLimits limits, TransportHandlers handlers);
  ~HttpTransport();
  // Binds host:port (0 = any free port) and returns the port; Error naming the address.
  int bind(const std::string& host, int port);
  // Runs the event loop on a background thread.
  void start();
  // Closes the listener and every connection and joins the loop thread.
  void stop();
  // Connections open now (for tests and logs).
  size_t connections() const;

  struct Impl;  // opaque: the Boost types live in the .cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp4lm::server
