#pragma once
// The serving engine: one thread owns the model and the scheduler and steps while there is work;
// any thread submits requests and reads their outputs through a RequestHandle. Front-ends (the
// HTTP server, the Python API) never run model code: they wait on handles.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine_core.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/step_model.h"

namespace fp4lm::engine {

class Engine;
class Runtime;  // engine/runtime.h

// One submitted request, shared by the engine thread (producer) and its reader.
class RequestHandle {
 public:
  int64_t id() const { return id_; }
  // The outputs produced since the last call, waiting up to `timeout` for the first one (empty
  // on timeout). After an output with finished = true nothing more comes.
  std::vector<RequestOutput> wait(std::chrono::milliseconds timeout);
  // Stops the request at the next step boundary (its last output has finish_reason "abort").
  void cancel();
  bool finished() const { return finished_.load(); }
  // Event-driven readers (the HTTP server's event loop) are told instead of blocking in wait():
  // `fn` runs on the engine thread after each new output (once at once when outputs are already
  // queued); it must only schedule the reader, which then calls wait(0).
  void set_listener(std::function<void()> fn);

 private:
  friend class Engine;
  RequestHandle(Engine& e, int64_t id) : engine_(e), id_(id) {}
  void push(RequestOutput out);

  Engine& engine_;
  int64_t id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  std::function<void()> listener_;
  std::atomic<bool> finished_{false};
};

struct EngineLoad {
  int64_t running = 0, waiting = 0;
  size_t kv_reserved_bytes = 0, kv_budget_bytes = 0;
};

class Engine {
 public:
  // Starts the engine thread. `tok` may be null; model and tokenizer must outlive the engine.
  Engine(StepModel& model, const tokenizer::Tokenizer* tok, SchedulerConfig cfg, SchedulerObserver obs = {});
  // What the runtime runs: a token-by-token model continuously batched (the constructor above), or
  // a DiffusionGemma through the DiffusionQueue (engine/diffusion_queue.h). `rt` outlives the engine.
  Engine(const Runtime& rt, const tokenizer::Tokenizer* tok, SchedulerConfig cfg, SchedulerObserver obs = {});
  ~Engine();  // aborts what is left and joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // RequestError (nothing queued) when the request can never run.
  std::shared_ptr<RequestHandle> submit(RequestParams p);
  void cancel(int64_t id);
  void cancel_all();
  EngineLoad load() const;
  int64_t max_model_len() const { return max_model_len_; }
  int64_t vocab_size() const { return vocab_; }
  // What admission reserves for a sequence of `capacity` positions (Scheduler::sequence_bytes;
  // const, fixed at construction).
  size_t sequence_bytes(int64_t capacity) const { return core_->sequence_bytes(capacity); }

 private:
  void loop();
  bool take_incoming();  // waits for work, queues submissions and cancellations; true when stopping
  void deliver(EngineCore::Outputs outs);

  std::unique_ptr<EngineCore> core_;  // only the engine thread touches it after construction (check() is const)
  int64_t max_model_len_, vocab_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::shared_ptr<RequestHandle>, RequestParams>> incoming_;
  std::vector<int64_t> cancels_;
  bool cancel_all_ = false, stop_ = false;
  int64_t next_id_ = 1;
  std::unordered_map<int64_t, std::shared_ptr<RequestHandle>> live_;  // engine thread only
  std::atomic<int64_t> running_{0}, waiting_{0};
  std::atomic<size_t> reserved_{0};
  std::thread thread_;
};

}  // namespace fp4lm::engine
