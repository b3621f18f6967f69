#pragma once
// The OpenAI-compatible HTTP front-end (cpp-httplib). Its threads only parse, validate, wait on
// engine handles and write; the model runs on the engine thread. The port is bound first and
// /health answers 503 until set_ready(); shutdown() stops taking requests (503), lets in-flight
// ones finish for a grace period, aborts the rest, and stops.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "server/metrics.h"
#include "server/serving_model.h"

namespace httplib {
class Server;
}

namespace fp4lm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;             // 0 = any free port
  std::string api_key;         // "" = no authentication
  int http_threads = 16;
  double shutdown_grace_s = 5;
  std::string version = "0";
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

 private:
  void routes();
  uint64_t random_u64();
  std::string request_id(const char* prefix);

  ServerOptions opts_;
  std::unique_ptr<httplib::Server> svr_;
  std::thread listener_;
  std::atomic<engine::Engine*> engine_{nullptr};
  const ServingModel* model_ = nullptr;
  ServingMetrics* metrics_ = nullptr;
  std::atomic<bool> shutting_down_{false};
  std::atomic<int64_t> active_{0};  // generation requests in flight
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
  int64_t started_at_ = 0;
};

}  // namespace fp4lm::server
