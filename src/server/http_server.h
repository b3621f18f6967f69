#pragma once
// The OpenAI-compatible HTTP front-end: routes over the event-driven transport (http_transport.h).
// The event loop answers /health, /version, /v1/models and /metrics itself and writes every
// response; request bodies (JSON, chat templates, tokenization, admission) go to a few worker
// threads, chat requests with images then to one image thread (loading, decoding, the vision
// tower; server/chat_images.h); the model runs on the engine thread. Before a body is read: CORS preflights, then the
// API key, then availability (503 while loading or shutting down). The port is bound first and
// /health answers 503 until set_ready(); shutdown() stops taking requests (503), lets in-flight
// ones finish for a grace period, aborts the rest, and stops.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/cors.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/serving_model.h"
#include "server/web_assets.h"
#include "server/worker_pool.h"

namespace fp4lm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0 = any free port
  std::string api_key;  // "" = no authentication
  bool open_metrics = false;  // /metrics without the key (when there is one)
  size_t workers = 2;         // threads for request bodies
  double shutdown_grace_s = 5;
  std::string version = "0";
  TransportLimits limits;
  CorsOptions cors;
  bool web_ui = true;  // the chat page at / (server/web_assets.h); --no-webui turns it off
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions opts);
  ~HttpServer();

  // Binds host:port; returns the port. Error naming the address when it cannot.
  int bind();
  // Serves on a background thread (/health 503 until set_ready).
  void start();
  // The engine is up: every endpoint answers from now on. All three must outlive the server.
  void set_ready(engine::Engine& engine, const ServingModel& model, ServingMetrics& metrics);
  // Graceful stop (see above); returns when the listener has stopped.
  void shutdown();

  struct Route;

 private:
  static const std::vector<Route>& route_table();
  std::optional<HttpResponse> on_head(const HttpRequest& head);
  void on_request(const std::shared_ptr<Exchange>& ex);
  void run_simple(const Route& route, const std::shared_ptr<Exchange>& ex);
  HttpResponse health(const HttpRequest& req, int64_t& prompt_tokens);
  HttpResponse version(const HttpRequest& req, int64_t& prompt_tokens);
  HttpResponse models(const HttpRequest& req, int64_t& prompt_tokens);
  HttpResponse metrics(const HttpRequest& req, int64_t& prompt_tokens);
  HttpResponse props(const HttpRequest& req, int64_t& prompt_tokens);
  HttpResponse tokenize(const HttpRequest& req, int64_t& prompt_tokens);
  HttpResponse detokenize(const HttpRequest& req, int64_t& prompt_tokens);
  using Clock = std::chrono::steady_clock;
  // kind: chat (true) or completions; none: /invocations, decided by the body.
  void generate(const std::shared_ptr<Exchange>& ex, std::optional<bool> kind);
  void admit(const std::shared_ptr<Exchange>& ex, bool chat, ApiRequest ar, Clock::time_point t0);
  void fail(const std::shared_ptr<Exchange>& ex, Clock::time_point t0, std::exception_ptr error);
  const EmbeddedFile* web_asset(const HttpRequest& req) const;
  uint64_t random_u64();
  std::string request_id(const char* prefix);

  ServerOptions opts_;
  CorsPolicy cors_;
  HttpTransport transport_;
  std::unique_ptr<WorkerPool> workers_;  // after the transport: its jobs post to the event loop
  std::unique_ptr<WorkerPool> image_worker_;  // one thread: requests with images (decode, vision tower)
  std::atomic<engine::Engine*> engine_{nullptr};
  const ServingModel* model_ = nullptr;
  ServingMetrics* metrics_ = nullptr;
  std::atomic<bool> shutting_down_{false};
  std::atomic<int64_t> active_{0};  // generation requests in flight
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
  int64_t started_at_ = 0;
  bool started_ = false;
};

}  // namespace fp4lm::server
