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
    : m_(m),
      s_(std::move(s)),
      tok_(tok),
      max_len_(max_model_len),
      budget_(cfg.kv_cache_bytes),
      max_num_seqs_(std::max<int64_t>(1, cfg.max_num_seqs)),
      max_logprobs_(cfg.max_logprobs),
      obs_(std::move(obs)) {}

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

size_t DiffusionQueue::kv_reserved_bytes() const {
  size_t b = 0;
  for (const auto& j : running_) b += j->bytes;
  return b;
}

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
  for (const auto& j : running_) cancelled_.insert(j->id);
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

void DiffusionQueue::admit(Outputs& outs) {
  // First come first served: the head waits while the batch is full or its cache does not fit
  // beside the running ones (check() refused any that could never fit).
  while (!waiting_.empty() && static_cast<int64_t>(running_.size()) < max_num_seqs_) {
    Job& j = *waiting_.front();
    if (budget_ > 0 && !running_.empty() && kv_reserved_bytes() + j.bytes > budget_) break;
    std::unique_ptr<Job> job = std::move(waiting_.front());
    waiting_.pop_front();
    job->scheduled = Clock::now();
    job->was_scheduled = true;
    try {
      job->run = std::make_unique<DiffusionRun>(m_, s_, std::move(job->p), tok_);
    } catch (const std::exception& e) {
      log().error("DiffusionGemma request {} failed: {}", job->id, e.what());
      RequestOutput out;
      out.error = e.what();
      out.cause = std::current_exception();
      finish(*job, out, "error");
      outs.emplace_back(job->id, std::move(out));
      continue;
    }
    running_.push_back(std::move(job));
  }
}

void DiffusionQueue::fail_jobs(const std::vector<size_t>& idx, const std::exception& e, Outputs& outs) {
  for (size_t i : idx) {
    Job& j = *running_[i];
    log().error("DiffusionGemma request {} failed: {}", j.id, e.what());
    RequestOutput out;
    out.error = e.what();
    out.cause = std::current_exception();
    finish(j, out, "error");
    outs.emplace_back(j.id, std::move(out));
    running_[i].reset();
  }
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
    for (auto& j : running_) {
      if (!cancelled_.count(j->id)) continue;
      RequestOutput out;
      out.text = j->run->take_text();
      finish(*j, out, "abort");
      outs.emplace_back(j->id, std::move(out));
      j.reset();
    }
    std::erase(running_, nullptr);
    cancelled_.clear();
  }
  admit(outs);
  if (running_.empty()) return outs;

  StepStats st;
  // The encoder pass: the prompts of the requests that start and the last blocks of those that
  // start a new canvas, in one forward.
  {
    std::vector<size_t> idx;
    std::vector<model::DiffusionGemma::EncodeItem> items;
    for (size_t i = 0; i < running_.size(); ++i) {
      DiffusionRun& r = *running_[i]->run;
      const std::span<const int32_t> ids = r.to_encode();
      if (ids.empty()) continue;
      if (r.result().canvases == 0) st.prompt_tokens += static_cast<int64_t>(ids.size());
      idx.push_back(i);
      items.push_back({&r.cache(), ids});
    }
    if (!items.empty()) {
      try {
        m_.encode_batch(items);
        for (size_t i : idx) running_[i]->run->encoded();
      } catch (const std::exception& e) {
        st.prompt_tokens = 0;
        fail_jobs(idx, e, outs);
      }
    }
  }
  // The decoder pass over every running canvas.
  std::vector<size_t> idx;
  std::vector<model::DiffusionGemma::DecodeItem> items;
  for (size_t i = 0; i < running_.size(); ++i) {
    if (!running_[i]) continue;
    DiffusionRun& r = *running_[i]->run;
    idx.push_back(i);
    items.push_back({&r.cache(), r.canvas(), r.self_conditioning()});
  }
  std::vector<std::vector<float>> logits;
  if (!items.empty()) {
    try {
      logits = m_.decode_batch(items);
    } catch (const std::exception& e) {
      fail_jobs(idx, e, outs);
      idx.clear();
    }
  }
  st.sequences = static_cast<int64_t>(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) {
    Job& j = *running_[idx[k]];
    RequestOutput out;
    try {
      std::optional<std::vector<int32_t>> block = j.run->denoised(std::move(logits[k]));
      if (!block) continue;
      const DiffusionResult& r = j.run->result();
      const auto now = Clock::now();
      if (r.canvases == 1) j.first_token = now;
      else j.itl.push_back(seconds(now - j.last_token));  // a gap per block: its tokens arrive together
      j.last_token = now;
      st.generation_tokens += static_cast<int64_t>(block->size());
      out.token_ids = std::move(*block);
      out.text = j.run->take_text();  // an ending EOS / stop id is not in it, a stop string cut
      out.prompt_tokens = static_cast<int64_t>(r.prompt_ids.size());
      out.completion_tokens = static_cast<int64_t>(r.output_ids.size());
      if (j.run->done()) {
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
    if (done) running_[idx[k]].reset();
  }
  std::erase(running_, nullptr);
  if (obs_.on_step) obs_.on_step(st);
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
  for (auto& j : running_) fail(*j);
  for (auto& j : waiting_) fail(*j);
  running_.clear();
  waiting_.clear();
  cancelled_.clear();
  return outs;
}

}  // namespace fp4lm::engine
