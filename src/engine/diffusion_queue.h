#pragma once
// The serving engine's core for a DiffusionGemma checkpoint (engine/engine_core.h): continuous
// batching of the denoising loop. Each step runs one decoder pass over the canvases of every
// running request together (model::DiffusionGemma::decode_batch), after one batched encoder pass
// over what the requests starting a canvas append (a new request's prompt, or its last accepted
// block); a request whose canvas ends delivers that block as one output (its ids and text).
// Requests join (first come first served, up to max_num_seqs and while their caches fit the
// --kv-cache-memory budget: one that does not fit waits) and leave between steps, and a cancel
// takes effect at the next step. Each request's output is bit-identical to running it alone
// (DiffusionRun's own steps and random stream; the forwards' batch invariance). A request whose
// cache could not fit the whole budget is refused by check(), and the request fields the loop
// has no meaning for are refused by name (check_diffusion_request).
#include <chrono>
#include <deque>
#include <memory>
#include <unordered_set>

#include "engine/diffusion_generator.h"
#include "engine/engine_core.h"
#include "engine/scheduler.h"
#include "engine/text_stream.h"
#include "model/diffusion_gemma.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::engine {

class DiffusionQueue final : public EngineCore {
 public:
  // `m` and `tok` (may be null: no text) outlive the queue. `max_model_len`: the most positions a
  // prompt and its canvases may take. Of `cfg` only max_num_seqs, kv_cache_bytes (0: no limit) and
  // max_logprobs apply.
  DiffusionQueue(const model::DiffusionGemma& m, DiffusionSchedule s, const tokenizer::Tokenizer* tok,
                 int64_t max_model_len, const SchedulerConfig& cfg, SchedulerObserver obs = {});
  ~DiffusionQueue() override;

  void check(const RequestParams& p) const override;
  void add(int64_t id, RequestParams p) override;
  void cancel(int64_t id) override { cancelled_.insert(id); }
  void cancel_all() override;
  bool has_work() const override { return !running_.empty() || !waiting_.empty() || !cancelled_.empty(); }
  Outputs step() override;
  Outputs fail_all(const std::string& why) override;
  int64_t num_running() const override { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const override { return static_cast<int64_t>(waiting_.size()); }
  size_t kv_reserved_bytes() const override;
  size_t kv_budget_bytes() const override { return budget_; }
  // The encoder cache of `capacity` positions (sliding layers keep sliding_window - 1) and the
  // denoiser's canvas-sized logits buffers.
  size_t sequence_bytes(int64_t capacity) const override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Job;
  void finish(Job& j, RequestOutput& out, const std::string& reason);
  void admit(Outputs& outs);
  // The jobs at `idx` of running_ fail with `e` (a batched forward that threw).
  void fail_jobs(const std::vector<size_t>& idx, const std::exception& e, Outputs& outs);

  const model::DiffusionGemma& m_;
  DiffusionSchedule s_;
  const tokenizer::Tokenizer* tok_;
  int64_t max_len_;
  size_t budget_;
  int64_t max_num_seqs_, max_logprobs_;
  SchedulerObserver obs_;
  std::deque<std::unique_ptr<Job>> waiting_;
  std::vector<std::unique_ptr<Job>> running_;  // in arrival order; null once finished within a step
  std::unordered_set<int64_t> cancelled_;
};

}  // namespace fp4lm::engine
