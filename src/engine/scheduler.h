#pragma once
// Continuous batching (vLLM's scheduler, without preemption): each step() is one forward over
//   1. every decoding sequence's next token (decode first, so streams keep flowing),
//   2. then prefill chunks of partially prefilled sequences, oldest first,
//   3. then newly admitted waiting requests (FCFS),
// up to max_num_batched_tokens tokens and max_num_seqs running sequences. A request is admitted
// only when its whole KV reservation (prompt + max_tokens positions) fits the memory budget, so
// the engine never runs out of memory mid-generation; until then it waits, and the queue head
// blocks later requests (strict FCFS). A request that could never fit is refused by check().
// Finished and cancelled sequences release their state at once. Pipelined (a StepModel with
// max_in_flight() = N > 1, dist/pipeline_step_model.h): the running sequences go in up to N
// groups of about running / N each; step() submits a forward per ready group until N are in
// flight, then collects and samples the oldest, so every stage works on some group at once. A
// sequence is in one group at a time and its logits depend on nothing else in the batch, so its
// tokens are the same in any grouping. Not thread-safe: one thread (engine/engine.h) owns it.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/prefix_cache.h"
#include "engine/request.h"
#include "engine/speculative.h"
#include "engine/step_model.h"
#include "engine/structured/matcher.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::engine {

struct SchedulerConfig {
  int64_t max_num_seqs = 8;
  int64_t max_num_batched_tokens = 512;
  size_t kv_cache_bytes = 0;  // admission budget (sequences and cached prefix blocks); 0 = unlimited
  // Automatic prefix caching (engine/prefix_cache.h): on in `fp4lm serve` and the Python LLM
  // unless turned off; off here so that one-request runs (generate) keep nothing.
  bool enable_prefix_caching = false;
  int64_t block_size = 16;  // tokens per cached block
  SpeculativeConfig speculative;  // engine/speculative.h; off by default
  // Structured outputs need the vocabulary as a byte trie (about 1 s for a 150k vocabulary): build
  // it in the background from construction on, so that the first structured request does not wait
  // for it (on in `fp4lm serve`; otherwise it is built by that first request).
  bool prebuild_structured_vocabulary = false;
  int64_t max_logprobs = kMaxLogprobs;  // vLLM's --max-logprobs (-1: no cap); `serve` sets it
};

// RequestError naming the parameter (max_num_seqs, max_num_batched_tokens) when inconsistent.
void check_config(const SchedulerConfig& cfg);

// Per finished request, for metrics (seconds).
struct RequestStats {
  std::string finish_reason;
  int64_t prompt_tokens = 0, generation_tokens = 0;
  double queue_s = 0;   // arrival -> first scheduled
  double ttft_s = 0;    // arrival -> first token (0 when none)
  double e2e_s = 0;     // arrival -> finished
  std::vector<double> inter_token_s;  // gaps between consecutive tokens
};

struct StepStats {
  int64_t prompt_tokens = 0;      // prompt tokens this forward ran, plus those the prefix cache supplied
  int64_t generation_tokens = 0;  // tokens sampled after it
  int64_t sequences = 0;
  // Prefix caching: prompt tokens of the requests admitted this step, and how many of them came
  // from the cache (vLLM's vllm:prefix_cache_queries / vllm:prefix_cache_hits).
  int64_t prefix_queries = 0, prefix_hits = 0;
  // Speculative decoding (vLLM's vllm:spec_decode_*): sequences that verified drafts this step,
  // draft tokens, accepted ones, and accepted ones per draft position.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;
};

struct SchedulerObserver {
  std::function<void(const StepStats&)> on_step;
  std::function<void(const RequestStats&)> on_finished;
};

class Scheduler {
 public:
  using Clock = std::chrono::steady_clock;
  // check_config() first.
  // `tok` may be null (no text output).
  Scheduler(StepModel& model, const tokenizer::Tokenizer* tok, SchedulerConfig cfg, SchedulerObserver obs = {});
  ~Scheduler();

  // RequestError when the request can never run: empty prompt, prompt + max_tokens beyond the
  // model length, a KV reservation larger than the whole budget, bad parameters.
  void check(const RequestParams& p) const;
  // Queues a request (check() first). `id` must be unique among live requests.
  void add(int64_t id, RequestParams p, Clock::time_point arrival = Clock::now());
  // Takes effect at the next step: the request finishes with finish_reason "abort".
  void cancel(int64_t id);
  // Cancels everything (shutdown).
  void cancel_all();

  using Outputs = std::vector<std::pair<int64_t, RequestOutput>>;
  bool has_work() const { return !waiting_.empty() || !running_.empty() || !cancelled_.empty(); }
  // One forward over the scheduled chunks (pipelined: submits forwards until N are in flight and
  // collects the oldest); returns each affected request's output. Never
  // throws for a request's sake: a failure while admitting or sampling a request finishes that
  // request with finish_reason "error" (and the cause in `error`); a failing forward finishes
  // the requests of that forward; everything else goes on.
  Outputs step();
  // Finishes every request with finish_reason "error" and `why` (the engine's last resort).
  Outputs fail_all(const std::string& why);

  // Speculative decoding in effect (configured, and the model can rewind).
  bool speculating() const { return spec_on_; }
  // What admission reserves for a sequence of `capacity` positions: the model's bytes_for, plus,
  // while speculating, what its verify chunks need besides (StepModel::speculation_bytes: the
  // replay log of a hybrid's recurrent layers).
  size_t sequence_bytes(int64_t capacity) const { return model_.bytes_for(capacity) + spec_bytes_; }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  size_t kv_reserved_bytes() const { return reserved_; }
  const SchedulerConfig& config() const { return cfg_; }
  const StepModel& model() const { return model_; }
  // The prefix cache (null when prefix caching is off) and its totals since construction.
  const PrefixCache* prefix_cache() const { return cache_.get(); }
  size_t prefix_cache_bytes() const { return cache_ ? cache_->bytes() : 0; }
  int64_t prefix_queries() const { return prefix_queries_; }
  int64_t prefix_hits() const { return prefix_hits_; }
  // The chunks of the last step as (request id, tokens): lets tests see decode-first and budget.
  const std::vector<std::pair<int64_t, int64_t>>& last_batch() const { return last_batch_; }

 private:
  struct Sequence;
  struct Planned {
    Sequence* s;
    int64_t n;    // tokens this step
    bool logits;  // the chunk ends the prompt (or decodes): sample after it
    int64_t drafts = 0;  // speculative draft tokens after a decoding sequence's last token
  };
  // A forward submitted and not yet collected, with the buffer its logits come back into.
  struct Group {
    std::vector<Planned> plan;
    std::vector<StepChunk> chunks;
    std::vector<float> logits;
    StepStats st;
  };
  // The phases of step(): cancellations, the running sequences' chunks (decode first), newly
  // admitted requests (at most `cap` sequences in all), the forward's chunks, and sampling.
  void drop_cancelled(Outputs& outs);
  int64_t plan_running(std::vector<Planned>& plan, size_t cap);  // returns the token budget left
  void admit_waiting(std::vector<Planned>& plan, int64_t budget, Outputs& outs, size_t cap);
  std::vector<StepChunk> chunks_of(const std::vector<Planned>& plan, StepStats& st, std::vector<float>& logits);
  // Pipelining: the most sequences a group takes, planning and submitting one (false: nothing to
  // run, or its submit failed and failed its requests), collecting the oldest, collecting all
  // (before requests are failed or the scheduler ends: the model writes into the groups' buffers).
  size_t group_cap() const;
  bool submit_group(Outputs& outs);
  void collect_group(Outputs& outs);
  void drain();
  void sample_planned(const std::vector<Planned>& plan, const std::vector<StepChunk>& chunks, Outputs& outs,
                      StepStats& st);
  void finish(Sequence& s, RequestOutput& out, const std::string& reason);
  void report_finished(Sequence& s, const std::string& reason);
  void fail(Sequence& s, const std::string& why, Outputs& outs, std::exception_ptr cause = nullptr);
  // `draft`: verify that proposed token instead of sampling freely (Sampler::verify).
  void sample_next(Sequence& s, float* logits, RequestOutput& out, const int32_t* draft = nullptr);
  // Speculative decoding: the drafts of the decoding sequences of a step (into each s.verify),
  // from what `budget` leaves after one token each; returns each one's number of drafts.
  std::vector<int64_t> propose(const std::vector<Sequence*>& seqs, int64_t budget);
  // s.verify = [last token, drafts...]; returns the number of drafts.
  static int64_t set_drafts(Sequence& s, const std::vector<int32_t>& d);
  // Prefix caching: the prompt tokens of the next chunk (within `budget`), the cached prefix a
  // newly admitted sequence starts from, the blocks its last chunk completed, memory for them.
  int64_t prefill_take(const Sequence& s, int64_t budget) const;
  int64_t prefill_take_unblocked(const Sequence& s, int64_t budget) const;  // before the image-block rule
  // The logits rows a planned chunk returns (prompt_logprobs: every prefill position's), and
  // the prompt logprobs of a prefill chunk of `n` tokens from them.
  int64_t logit_rows(const Planned& p) const;
  void collect_prompt_logprobs(Sequence& s, int64_t n, const float* logits);
  void load_cached_prefix(Sequence& s);
  void cache_computed_blocks(Sequence& s);
  bool make_room(size_t bytes);

  // Compiles structured-output specs against the tokenizer's vocabulary (made on first use).
  structured::GrammarCompiler& grammars() const;

  StepModel& model_;
  const tokenizer::Tokenizer* tok_;
  mutable std::unique_ptr<structured::GrammarCompiler> grammars_;
  mutable std::once_flag grammars_once_;  // check() runs on API threads, add() on the engine's
  // prebuild_structured_vocabulary: the trie being built (its destructor waits for the build).
  std::shared_future<std::shared_ptr<const structured::TokenVocabulary>> vocabulary_;
  SchedulerConfig cfg_;
  SchedulerObserver obs_;
  std::vector<int64_t> eos_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  std::unordered_set<int64_t> cancelled_;
  size_t reserved_ = 0;
  std::unique_ptr<PrefixCache> cache_;
  bool spec_on_ = false;
  size_t spec_bytes_ = 0;  // model_.speculation_bytes(k) while speculating
  PrefixSupport support_;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0, step_queries_ = 0, step_hits_ = 0;
  std::vector<float> raw_;
  int64_t depth_ = 1;  // model_.max_in_flight()
  std::deque<Group> in_flight_;  // oldest first
  std::vector<std::vector<float>> spare_logits_;  // collected groups' buffers, reused
  std::vector<std::pair<int64_t, int64_t>> last_batch_;
};

}  // namespace fp4lm::engine
