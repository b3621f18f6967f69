#pragma once
// The serving engine's core for a DiffusionGemma checkpoint (engine/engine_core.h): requests run
// one at a time, first come first served, each step denoising one canvas of the running request
// (DiffusionRun) and delivering the block it accepted as one output (its ids and text), so that
// cancellation and streaming happen between canvases. The denoiser runs a request at batch 1 (as
// transformers' generate does here), so running several at once would only interleave them: one
// at a time keeps the memory to one sequence's cache, and a request whose cache could not fit
// the --kv-cache-memory budget is refused by check(). The request fields the loop has no meaning
// for are refused by name (check_diffusion_request).
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
  // prompt and its canvases may take. Of `cfg` only kv_cache_bytes (0: no limit) and max_logprobs apply.
  DiffusionQueue(const model::DiffusionGemma& m, DiffusionSchedule s, const tokenizer::Tokenizer* tok,
                 int64_t max_model_len, const SchedulerConfig& cfg, SchedulerObserver obs = {});
  ~DiffusionQueue() override;

  void check(const RequestParams& p) const override;
  void add(int64_t id, RequestParams p) override;
  void cancel(int64_t id) override { cancelled_.insert(id); }
  void cancel_all() override;
  bool has_work() const override { return running_ || !waiting_.empty() || !cancelled_.empty(); }
  Outputs step() override;
  Outputs fail_all(const std::string& why) override;
  int64_t num_running() const override { return running_ ? 1 : 0; }
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

  const model::DiffusionGemma& m_;
  DiffusionSchedule s_;
  const tokenizer::Tokenizer* tok_;
  int64_t max_len_;
  size_t budget_;
  int64_t max_logprobs_;
  SchedulerObserver obs_;
  std::deque<std::unique_ptr<Job>> waiting_;
  std::unique_ptr<Job> running_;
  std::unordered_set<int64_t> cancelled_;
};

}  // namespace fp4lm::engine
