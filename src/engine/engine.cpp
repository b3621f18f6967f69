#include "engine/engine.h"

#include <fmt/format.h>

#include "core/log.h"
#include "engine/diffusion_queue.h"
#include "engine/runtime.h"

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

namespace {

// The continuous-batching Scheduler as the engine's core.
class SchedulerCore final : public EngineCore {
 public:
  SchedulerCore(StepModel& model, const tokenizer::Tokenizer* tok, SchedulerConfig cfg, SchedulerObserver obs)
      : s_(model, tok, cfg, std::move(obs)) {}
  void check(const RequestParams& p) const override { s_.check(p); }
  void add(int64_t id, RequestParams p) override { s_.add(id, std::move(p)); }
  void cancel(int64_t id) override { s_.cancel(id); }
  void cancel_all() override { s_.cancel_all(); }
  bool has_work() const override { return s_.has_work(); }
  Outputs step() override { return s_.step(); }
  Outputs fail_all(const std::string& why) override { return s_.fail_all(why); }
  int64_t num_running() const override { return s_.num_running(); }
  int64_t num_waiting() const override { return s_.num_waiting(); }
  size_t kv_reserved_bytes() const override { return s_.kv_reserved_bytes(); }
  size_t kv_budget_bytes() const override { return s_.config().kv_cache_bytes; }
  size_t sequence_bytes(int64_t capacity) const override { return s_.sequence_bytes(capacity); }

 private:
  Scheduler s_;
};

}  // namespace

Engine::Engine(StepModel& model, const tokenizer::Tokenizer* tok, SchedulerConfig cfg, SchedulerObserver obs)
    : core_(std::make_unique<SchedulerCore>(model, tok, cfg, std::move(obs))),
      max_model_len_(model.max_model_len()),
      vocab_(model.vocab_size()) {
  thread_ = std::thread([this] { loop(); });
}

Engine::Engine(const Runtime& rt, const tokenizer::Tokenizer* tok, SchedulerConfig cfg, SchedulerObserver obs)
    : core_(rt.diffusion() ? std::unique_ptr<EngineCore>(std::make_unique<DiffusionQueue>(
                                 *rt.diffusion(), rt.diffusion_schedule(), tok, rt.max_model_len(), cfg, std::move(obs)))
                           : std::make_unique<SchedulerCore>(rt.step_model(), tok, cfg, std::move(obs))),
      max_model_len_(rt.max_model_len()),
      vocab_(rt.vocab_size()) {
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
  core_->check(p);
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
  l.kv_budget_bytes = core_->kv_budget_bytes();
  return l;
}

bool Engine::take_incoming() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return stop_ || !incoming_.empty() || !cancels_.empty() || cancel_all_ || core_->has_work(); });
  for (auto& [h, p] : incoming_) {
    const int64_t id = h->id();
    try {
      core_->add(id, std::move(p));
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
  for (int64_t id : cancels_) core_->cancel(id);
  cancels_.clear();
  if (cancel_all_ || stop_) core_->cancel_all();
  cancel_all_ = false;
  return stop_;
}

void Engine::deliver(EngineCore::Outputs outs) {
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
    EngineCore::Outputs outs;
    try {
      outs = core_->step();
    } catch (const std::exception& e) {
      // step() fails only the requests at fault; should anything escape it, the requests in
      // flight fail with the cause and the engine keeps serving new ones.
      log().error("engine step failed: {}", e.what());
      outs = core_->fail_all(fmt::format("engine step failed: {}", e.what()));
    }
    // The load is published before the outputs: a reader holding its request's last output sees
    // a load that no longer counts it.
    running_ = core_->num_running();
    {
      std::lock_guard lk(mu_);
      waiting_ = core_->num_waiting() + static_cast<int64_t>(incoming_.size());
    }
    reserved_ = core_->kv_reserved_bytes();
    deliver(std::move(outs));
    if (stopping && !core_->has_work()) return;
  }
}

}  // namespace fp4lm::engine
