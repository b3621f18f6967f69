#include "engine/diffusion_queue.h"

#include <algorithm>
#include <exception>

#include <fmt/format.h>

#include "core/log.h"

namespace fp4lm::engine {

namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The positions a request's prompt and its whole canvases take.
int64_t positions(const RequestParams& p, int64_t canvas) {
  return static_cast<int64_t>(p.prompt.size()) + (p.max_tokens + canvas - 1) / canvas * canvas;
}

}  // namespace

struct DiffusionQueue::Job {
  int64_t id = 0;
  RequestParams p;  // moved into `run` when the job starts
  size_t bytes = 0;
  Clock::time_point arrival, scheduled, first_token, last_token;
  bool was_scheduled = false;
  std::vector<double> itl;
  std::unique_ptr<DiffusionRun> run;
  Job(int64_t i, RequestParams params, size_t b) : id(i), p(std::move(params)), bytes(b), arrival(Clock::now()) {}
};

DiffusionQueue::DiffusionQueue(const model::DiffusionGemma& m, DiffusionSchedule s, const tokenizer::Tokenizer* tok,
                               int64_t max_model_len, const SchedulerConfig& cfg, SchedulerObserver obs)
    : m_(m), s_(std::move(s)), tok_(tok), max_len_(max_model_len), budget_(cfg.kv_cache_bytes), max_logprobs_(cfg.max_logprobs), obs_(std::move(obs)) {}

DiffusionQueue::~DiffusionQueue() = default;

size_t DiffusionQueue::sequence_bytes(int64_t capacity) const {
  const model::DiffusionGemmaConfig& c = m_.config();
  size_t b = 0;
  for (const auto& l : c.layers) {
    const int64_t rows = l.sliding ? std::min(capacity, c.sliding_window - 1) : capacity;
    b += static_cast<size_t>(rows * l.kv_heads * l.head_dim) * 2 * sizeof(float);
  }
  // The denoiser's logits, the self-conditioning copy and the next step's.
  return b + static_cast<size_t>(3 * c.canvas_length * c.vocab_size) * sizeof(float);
}

size_t DiffusionQueue::kv_reserved_bytes() const { return running_ ? running_->bytes : 0; }

void DiffusionQueue::check(const RequestParams& p) const {
  // The ranges every request is held to (ids within the vocabulary, prompt + max_tokens within
  // the context), then what the diffusion loop supports.
  validate(p, RequestLimits{m_.config().vocab_size, max_len_, max_logprobs_});
  check_diffusion_request(m_.config(), p, max_len_);
  if (!p.stop.empty() && !tok_)
    throw RequestError("stop strings need the checkpoint's tokenizer (give stop_token_ids)", "stop");
  const int64_t n = positions(p, m_.config().canvas_length);
  const size_t need = sequence_bytes(n);
  if (budget_ > 0 && need > budget_)
    throw RequestError(fmt::format("this request needs {} bytes of cache ({} prompt tokens + whole canvases of {}), "
                                   "more than the whole budget of {} bytes (kv_cache_memory)",
                                   need, p.prompt.size(), m_.config().canvas_length, budget_),
                       "max_tokens");
}

void DiffusionQueue::add(int64_t id, RequestParams p) {
  const size_t bytes = sequence_bytes(positions(p, m_.config().canvas_length));
  waiting_.push_back(std::make_unique<Job>(id, std::move(p), bytes));
}

void DiffusionQueue::cancel_all() {
  for (const auto& j : waiting_) cancelled_.insert(j->id);
  if (running_) cancelled_.insert(running_->id);
}

void DiffusionQueue::finish(Job& j, RequestOutput& out, const std::string& reason) {
  out.finished = true;
  out.finish_reason = reason;
  if (!obs_.on_finished) return;
  const auto now = Clock::now();
  RequestStats st;
  st.finish_reason = reason;
  st.prompt_tokens = static_cast<int64_t>(j.run ? j.run->result().prompt_ids.size() : j.p.prompt.size());
  st.generation_tokens = j.run ? static_cast<int64_t>(j.run->result().output_ids.size()) : 0;
  st.queue_s = seconds((j.was_scheduled ? j.scheduled : now) - j.arrival);
  st.ttft_s = st.generation_tokens > 0 ? seconds(j.first_token - j.arrival) : 0;
  st.e2e_s = seconds(now - j.arrival);
  st.inter_token_s = std::move(j.itl);
  obs_.on_finished(st);
}

DiffusionQueue::Outputs DiffusionQueue::step() {
  Outputs outs;
  if (!cancelled_.empty()) {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (!cancelled_.count((*it)->id)) {
        ++it;
        continue;
      }
      RequestOutput out;
      finish(**it, out, "abort");
      outs.emplace_back((*it)->id, std::move(out));
      it = waiting_.erase(it);
    }
    if (running_ && cancelled_.count(running_->id)) {
      RequestOutput out;
      if (running_->run) out.text = running_->run->take_text();
      finish(*running_, out, "abort");
      outs.emplace_back(running_->id, std::move(out));
      running_.reset();
    }
    cancelled_.clear();
  }
  if (!running_ && !waiting_.empty()) {
    running_ = std::move(waiting_.front());
    waiting_.pop_front();
    running_->scheduled = Clock::now();
    running_->was_scheduled = true;
  }
  if (!running_) return outs;
  Job& j = *running_;
  RequestOutput out;
  try {
    const bool first = !j.run;
    if (first) j.run = std::make_unique<DiffusionRun>(m_, s_, std::move(j.p), tok_);
    const std::vector<int32_t> block = j.run->next_block();
    const DiffusionResult& r = j.run->result();
    const bool done = j.run->done();
    const auto now = Clock::now();
    if (first) j.first_token = now;
    else j.itl.push_back(seconds(now - j.last_token));  // a gap per block: its tokens arrive together
    j.last_token = now;
    out.token_ids = block;
    out.text = j.run->take_text();  // an ending EOS / stop id is not in it, a stop string cut
    out.prompt_tokens = static_cast<int64_t>(r.prompt_ids.size());
    out.completion_tokens = static_cast<int64_t>(r.output_ids.size());
    if (obs_.on_step) {
      StepStats st;
      st.prompt_tokens = first ? out.prompt_tokens : 0;
      st.generation_tokens = static_cast<int64_t>(block.size());
      st.sequences = 1;
      obs_.on_step(st);
    }
    if (done) {
      out.stop_token = r.stop_token;
      out.stop_reason = r.stop_reason;
      finish(j, out, r.finish_reason);
    }
  } catch (const std::exception& e) {
    log().error("DiffusionGemma request {} failed: {}", j.id, e.what());
    out = RequestOutput{};
    out.error = e.what();
    out.cause = std::current_exception();
    finish(j, out, "error");
  }
  const bool done = out.finished;
  outs.emplace_back(j.id, std::move(out));
  if (done) running_.reset();
  return outs;
}

DiffusionQueue::Outputs DiffusionQueue::fail_all(const std::string& why) {
  Outputs outs;
  auto fail = [&](Job& j) {
    RequestOutput out;
    out.error = why;
    finish(j, out, "error");
    outs.emplace_back(j.id, std::move(out));
  };
  if (running_) fail(*running_);
  for (auto& j : waiting_) fail(*j);
  running_.reset();
  waiting_.clear();
  cancelled_.clear();
  return outs;
}

}  // namespace fp4lm::engine
