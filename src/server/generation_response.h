#pragma once
// The answer to one generation request, driven on the event loop by its engine outputs: SSE
// events as tokens come (stream: true; a comment line after each second of silence), or one JSON
// response at the end. The client going away cancels the sequence at the next engine step; the
// access-log line is written when the answer ends (499 for a non-streaming client that left).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/http_transport.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/serving_model.h"

namespace fp4lm::server {

class GenerationResponse : public std::enable_shared_from_this<GenerationResponse> {
 public:
  // `handles`: one engine request per choice (ResponseBuilder's order). `fields`: extra response
  // fields (CORS); `on_end` runs once when the answer has ended.
  GenerationResponse(std::shared_ptr<Exchange> ex, ApiRequest req, const ServingModel& m, std::string id,
                     int64_t created, std::vector<std::shared_ptr<engine::RequestHandle>> handles, HeaderFields fields,
                     std::function<void()> on_end);
  // From any thread: starts listening to the engine (the work itself runs on the event loop).
  void start();

 private:
  using Clock = std::chrono::steady_clock;
  void begin();
  void schedule_drain();
  void drain();
  bool stream_output(size_t c, const engine::RequestOutput& out);
  void finish(const engine::RequestOutput& last);
  void cancel_all();
  void keep_alive_tick();
  void client_gone();
  void log_end(int status, const char* note) const;

  std::shared_ptr<Exchange> ex_;
  ApiRequest req_;
  std::unique_ptr<ResponseBuilder> rb_;
  std::vector<std::shared_ptr<engine::RequestHandle>> handles_;
  std::vector<bool> done_;
  size_t open_ = 0;  // choices not finished yet
  HeaderFields fields_;
  std::function<void()> on_end_;
  std::atomic<bool> drain_scheduled_{false};
  bool ended_ = false, client_gone_ = false;
  Clock::time_point start_, last_write_;
};

}  // namespace fp4lm::server
