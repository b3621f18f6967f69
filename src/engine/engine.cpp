#include "engine/engine.h"

#include <fmt/format.h>

#include "core/log.h"

namespace fp4lm::engine {

std::vector<RequestOutput> RequestHandle::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !queue_.empty(); });
  std::vector<RequestOutput> out(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  return out;
}

void RequestHandle::cancel() {
  if (!finished_) engine_.cancel(id_);
}

void RequestHandle::set_listener(std::function<void()> fn) {
  bool pending = false;
  {
    std::lock_guard lk(mu_);
    listener_ = fn;
    pending = !queue_.empty();
  }
  if (pending && fn) fn();
}

void RequestHandle::push(RequestOutput out) {
  std::function<void()> listener;
  {
    std::lock_guard lk(mu_);
    if (out.finished) finished_ = true;
    queue_.push_back(std::move(out));
    listener = listener_;
  }
  cv_.notify_all();
  if (listener) listener();
}

Engine::Engine(StepModel& model, const tokenizer::Tokenizer* tok, SchedulerConfig cfg, SchedulerObserver obs)
    : sched_(model, tok, cfg, std::move(obs)), max_model_len_(model.max_model_len()), vocab_(model.vocab_size()) {
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<RequestHandle> Engine::submit(RequestParams p) {
  sched_.check(p);
  std::shared_ptr<RequestHandle> h;
  {
    std::lock_guard lk(mu_);
    h.reset(new RequestHandle(*this, next_id_++));
    incoming_.emplace_back(h, std::move(p));
    waiting_ += 1;
  }
  cv_.notify_all();
  return h;
}

void Engine::cancel(int64_t id) {
  {
    std::lock_guard lk(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

void Engine::cancel_all() {
  {
    std::lock_guard lk(mu_);
    cancel_all_ = true;
  }
  cv_.notify_all();
}

EngineLoad Engine::load() const {
  EngineLoad l;
  l.running = running_.load();
  l.waiting = waiting_.load();
  l.kv_reserved_bytes = reserved_.load();
  l.kv_budget_bytes = sched_.config().kv_cache_bytes;
  return l;
}

bool Engine::take_incoming() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return stop_ || !incoming_.empty() || !cancels_.empty() || cancel_all_ || sched_.has_work(); });
  for (auto& [h, p] : incoming_) {
    const int64_t id = h->id();
    try {
      sched_.add(id, std::move(p));
      live_[id] = h;
    } catch (const std::exception& e) {  // checked in submit(); kept for safety
      RequestOutput out;
      out.finished = true;
      out.finish_reason = "error";
      out.error = e.what();
      h->push(std::move(out));
    }
  }
  incoming_.clear();
  for (int64_t id : cancels_) sched_.cancel(id);
  cancels_.clear();
  if (cancel_all_ || stop_) sched_.cancel_all();
  cancel_all_ = false;
  return stop_;
}

void Engine::deliver(Scheduler::Outputs outs) {
  for (auto& [id, out] : outs) {
    auto it = live_.find(id);
    if (it == live_.end()) continue;
    const bool done = out.finished;
    it->second->push(std::move(out));
    if (done) live_.erase(it);
  }
}

void Engine::loop() {
  while (true) {
    const bool stopping = take_incoming();
    Scheduler::Outputs outs;
    try {
      outs = sched_.step();
    } catch (const std::exception& e) {
      // step() fails only the requests at fault; should anything escape it, the requests in
      // flight fail with the cause and the engine keeps serving new ones.
      log().error("engine step failed: {}", e.what());
      outs = sched_.fail_all(fmt::format("engine step failed: {}", e.what()));
    }
    // The load is published before the outputs: a reader holding its request's last output sees
    // a load that no longer counts it.
    running_ = sched_.num_running();
    {
      std::lock_guard lk(mu_);
      waiting_ = sched_.num_waiting() + static_cast<int64_t>(incoming_.size());
    }
    reserved_ = sched_.kv_reserved_bytes();
    deliver(std::move(outs));
    if (stopping && !sched_.has_work()) return;
  }
}

}  // namespace fp4lm::engine
