#include "engine/scheduler.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "core/log.h"
#include "engine/logits_processing.h"
#include "engine/prompt_images.h"
#include "engine/sampler.h"
#include "engine/structured/grammar_error.h"
#include "engine/text_stream.h"

namespace fp4lm::engine {

namespace {
double seconds(Scheduler::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A prefill chunk of a request with prompt_logprobs returns every position's logits: at most this
// many floats (64 MiB) per chunk, so a long prompt is cut into more chunks instead.
constexpr int64_t kPromptLogitsFloats = int64_t{1} << 24;
}  // namespace

struct Scheduler::Sequence {
  int64_t id = 0;
  RequestParams p;
  int64_t kv = -1;         // StepModel sequence id once admitted
  size_t kv_bytes = 0;
  int64_t prefilled = 0;   // prompt tokens already run (or loaded from the prefix cache)
  int64_t cached = 0;      // prompt tokens loaded from the prefix cache
  std::vector<PrefixCache::BlockId> blocks;  // the cached blocks of its prompt it holds a reference on
  bool caching = true;     // its next full prompt blocks go into the prefix cache
  std::vector<int32_t> verify;  // speculative decoding: [last sampled token, drafts...]
  std::vector<int32_t> output;
  std::vector<TokenLogprob> prompt_lps;  // prompt_logprobs so far (handed out with the first token)
  Sampler sampler;
  TextStream text;
  PenaltyState penalties;
  std::optional<structured::GrammarMatcher> grammar;  // structured outputs
  std::vector<int64_t> stop_ids;  // EOS (unless ignore_eos) + stop_token_ids
  Clock::time_point arrival, scheduled, first_token, last_token;
  bool was_scheduled = false;
  bool finished = false;
  bool in_flight = false;  // in a submitted forward not yet collected
  std::vector<double> itl;

  Sequence(int64_t id_, RequestParams params, const tokenizer::Tokenizer* tok, const std::vector<int64_t>& eos)
      : id(id_), p(std::move(params)), sampler(p.sampling), text(tok, p.stop, p.skip_special_tokens) {
    if (!p.ignore_eos) stop_ids = eos;
    stop_ids.insert(stop_ids.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
    if (p.repetition_penalty != 1) penalties.prompt.insert(p.prompt.begin(), p.prompt.end());
  }
  int64_t prompt_len() const { return static_cast<int64_t>(p.prompt.size()); }
  // What the prefix cache sees: the prompt, its image placeholders keyed by content.
  std::span<const int32_t> cache_key() const { return p.images ? p.images->cache_key : p.prompt; }
  bool decoding() const { return prefilled == prompt_len(); }
  int64_t capacity() const { return prompt_len() + p.max_tokens; }
  // Its prefill chunks return every position's logits (prompt_logprobs).
  bool prompt_logits() const { return p.prompt_logprobs >= 0 && !decoding(); }
  bool is_stop_id(int32_t t) const { return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end(); }
};

void check_config(const SchedulerConfig& cfg) {
  if (cfg.max_num_seqs < 1)
    throw RequestError(fmt::format("max_num_seqs must be >= 1, got {}", cfg.max_num_seqs), "max_num_seqs");
  if (cfg.block_size < 1 || cfg.block_size > 4096)
    throw RequestError(fmt::format("block_size must be in [1, 4096], got {}", cfg.block_size), "block_size");
  if (cfg.max_num_batched_tokens < cfg.max_num_seqs)
    throw RequestError(fmt::format("max_num_batched_tokens ({}) must be >= max_num_seqs ({})",
                                   cfg.max_num_batched_tokens, cfg.max_num_seqs),
                       "max_num_batched_tokens");
}

Scheduler::Scheduler(StepModel& model, const tokenizer::Tokenizer* tok, SchedulerConfig cfg, SchedulerObserver obs)
    : model_(model), tok_(tok), cfg_(cfg), obs_(std::move(obs)), eos_(model.eos_ids()) {
  check_config(cfg_);
  depth_ = std::max<int64_t>(1, model_.max_in_flight());
  if (depth_ > 1)
    log().info("pipelined batches: up to {} forwards in flight, the running sequences in up to {} groups", depth_,
               depth_);
  if (cfg_.speculative.enabled()) {
    const bool mtp = cfg_.speculative.method == "mtp";
    if (mtp && !model_.can_draft())
      throw RequestError("speculative_config: method mtp needs the model loaded with its MTP head",
                         "speculative_config");
    spec_on_ = model_.can_rewind();
    if (spec_on_) spec_bytes_ = model_.speculation_bytes(cfg_.speculative.num_speculative_tokens);
    if (spec_bytes_ > 0)
      log().info("speculative decoding: {} more bytes reserved per sequence (what verify chunks of up to {} rows "
                 "keep: the recurrent layers' replay log, the MTP drafter's rows)",
                 spec_bytes_, cfg_.speculative.num_speculative_tokens + 1);
    if (spec_on_ && mtp)
      log().info("speculative decoding: up to {} drafts per step from the model's MTP head",
                 cfg_.speculative.num_speculative_tokens);
    else if (spec_on_)
      log().info("speculative decoding: {} drafts of up to {} tokens (n-grams of {}..{})", cfg_.speculative.method,
                 cfg_.speculative.num_speculative_tokens, cfg_.speculative.prompt_lookup_min,
                 cfg_.speculative.prompt_lookup_max);
    else
      log().info("speculative decoding is off for this model: its recurrent state cannot be rewound past "
                 "rejected drafts");
  }
  if (cfg_.prebuild_structured_vocabulary && tok_)
    vocabulary_ = std::async(std::launch::async, [tok = tok_, n = model_.vocab_size()] {
                    return std::shared_ptr<const structured::TokenVocabulary>(
                        std::make_shared<const structured::TokenVocabulary>(*tok, n));
                  }).share();
  if (cfg_.enable_prefix_caching) support_ = model_.prefix_support(cfg_.block_size);
  if (cfg_.enable_prefix_caching && !support_.unsupported.empty())
    log().info("prefix caching is off for this model: {}", support_.unsupported);
  if (cfg_.enable_prefix_caching && support_.unsupported.empty()) {
    cache_ = std::make_unique<PrefixCache>(cfg_.block_size);
    std::string how;
    if (support_.snapshot_grid > 0)
      how += fmt::format("; recurrent state saved at the last multiple of {} positions of each prompt, where "
                         "prefill chunks are cut",
                         support_.snapshot_grid);
    if (support_.max_chunk > 0)
      how += fmt::format("; prefill chunks of at most {} tokens (sliding-window ring)", support_.max_chunk);
    log().info("prefix caching: blocks of {} tokens{}", cfg_.block_size, how);
  }
}

Scheduler::~Scheduler() {
  drain();
  for (auto& s : running_) model_.release(s->kv);
}

void Scheduler::drain() {
  while (!in_flight_.empty()) {
    try {
      model_.collect();
    } catch (const std::exception& e) {  // its requests are being failed or dropped anyway
      log().warn("a forward in flight failed: {}", e.what());
    }
    for (const Planned& p : in_flight_.front().plan) p.s->in_flight = false;
    in_flight_.pop_front();
  }
}

structured::GrammarCompiler& Scheduler::grammars() const {
  std::call_once(grammars_once_, [this] {
    grammars_ = std::make_unique<structured::GrammarCompiler>(
        vocabulary_.valid() ? vocabulary_.get()
                            : std::make_shared<const structured::TokenVocabulary>(*tok_, model_.vocab_size()));
  });
  return *grammars_;
}

void Scheduler::check(const RequestParams& p) const {
  validate(p, RequestLimits{model_.vocab_size(), model_.max_model_len(), cfg_.max_logprobs});
  if (p.structured.active()) {
    if (!tok_) throw RequestError("structured outputs need the model's tokenizer", p.structured.param);
    try {
      grammars().compile(p.structured);
    } catch (const structured::GrammarError& e) {
      throw RequestError(e.what(), p.structured.param);
    }
  }
  // validate() bounds prompt + max_tokens by max_model_len, so this sum cannot overflow.
  const int64_t prompt = static_cast<int64_t>(p.prompt.size());
  const size_t need = sequence_bytes(prompt + p.max_tokens);
  if (cfg_.kv_cache_bytes > 0 && need > cfg_.kv_cache_bytes)
    throw RequestError(fmt::format("this request needs {} bytes of KV cache ({} prompt + {} completion tokens{}), "
                                   "more than the whole budget of {} bytes (kv_cache_memory)",
                                   need, prompt, p.max_tokens,
                                   spec_bytes_ > 0 ? fmt::format(", {} of them for speculative decoding", spec_bytes_)
                                                   : std::string(),
                                   cfg_.kv_cache_bytes),
                       "max_tokens");
}

void Scheduler::add(int64_t id, RequestParams p, Clock::time_point arrival) {
  check(p);
  auto s = std::make_unique<Sequence>(id, std::move(p), tok_, eos_);
  if (s->p.structured.active()) s->grammar.emplace(grammars().compile(s->p.structured));
  s->arrival = arrival;
  waiting_.push_back(std::move(s));
}

void Scheduler::cancel(int64_t id) { cancelled_.insert(id); }

void Scheduler::cancel_all() {
  for (auto& s : waiting_) cancelled_.insert(s->id);
  for (auto& s : running_) cancelled_.insert(s->id);
}

// Marks `s` finished only once its state is released: should release throw, the request is still
// unfinished and the caller's failure path (fail) answers it. The observer (metrics) comes last
// and cannot fail the request: its exceptions are logged.
void Scheduler::finish(Sequence& s, RequestOutput& out, const std::string& reason) {
  out.finished = true;
  out.finish_reason = reason;
  out.prompt_tokens = s.prompt_len();
  out.completion_tokens = static_cast<int64_t>(s.output.size());
  out.cached_tokens = s.cached;
  if (cache_) {
    cache_->release(s.blocks);
    s.blocks.clear();
  }
  if (s.kv >= 0) {
    model_.release(s.kv);
    reserved_ -= s.kv_bytes;
    s.kv = -1;
  }
  s.finished = true;
  try {
    report_finished(s, reason);
  } catch (const std::exception& e) {
    log().error("request {}: the finish observer failed: {}", s.id, e.what());
  }
}

void Scheduler::report_finished(Sequence& s, const std::string& reason) {
  if (obs_.on_finished) {
    const auto now = Clock::now();
    RequestStats st;
    st.finish_reason = reason;
    st.prompt_tokens = s.prompt_len();
    st.generation_tokens = static_cast<int64_t>(s.output.size());
    st.queue_s = seconds((s.was_scheduled ? s.scheduled : now) - s.arrival);
    st.ttft_s = s.output.empty() ? 0 : seconds(s.first_token - s.arrival);
    st.e2e_s = seconds(now - s.arrival);
    st.inter_token_s = std::move(s.itl);
    obs_.on_finished(st);
  }
}

void Scheduler::sample_next(Sequence& s, float* logits, RequestOutput& out, const int32_t* draft) {
  const int64_t vocab = model_.vocab_size();
  // Logprobs come from the raw logits: keep them before masking and penalties change the row.
  if (s.p.logprobs >= 0) raw_.assign(logits, logits + vocab);
  if (!s.p.allowed_token_ids.empty()) allow_only(logits, vocab, s.p.allowed_token_ids);
  if (static_cast<int64_t>(s.output.size()) < s.p.min_tokens) mask_ids(logits, vocab, s.stop_ids);
  if (has_penalties(s.p)) apply_penalties(logits, vocab, s.p, s.penalties);
  if (!s.p.logit_bias.empty()) apply_logit_bias(logits, vocab, s.p.logit_bias);
  if (s.grammar) s.grammar->apply(logits, vocab, s.stop_ids);
  const int32_t tok = draft ? s.sampler.verify(logits, vocab, *draft) : s.sampler.sample(logits, vocab);
  if (s.grammar && !s.is_stop_id(tok)) s.grammar->accept(tok);
  s.output.push_back(tok);
  ++s.penalties.output_counts[tok];
  const auto now = Clock::now();
  if (s.output.size() == 1) {
    s.first_token = now;
    if (s.p.prompt_logprobs >= 0) out.prompt_logprobs = std::move(s.prompt_lps);
  } else {
    s.itl.push_back(seconds(now - s.last_token));
  }
  s.last_token = now;
  out.token_ids.push_back(tok);
  if (s.p.logprobs >= 0)
    out.logprobs.push_back(s.p.logprob_token_ids.empty()
                               ? token_logprob(raw_.data(), vocab, tok, s.p.logprobs)
                               : token_logprob_of(raw_.data(), vocab, tok, s.p.logprob_token_ids));

  std::string reason;
  if (s.is_stop_id(tok)) {
    // vLLM reports the id as stop_reason for stop_token_ids, nothing for EOS.
    if (std::find(s.p.stop_token_ids.begin(), s.p.stop_token_ids.end(), tok) != s.p.stop_token_ids.end())
      out.stop_token = tok;
    s.text.finish();
    reason = "stop";
  } else if (s.text.push(tok)) {
    reason = "stop";
  } else if (static_cast<int64_t>(s.output.size()) >= s.p.max_tokens) {
    reason = s.text.finish() ? "stop" : "length";
  }
  out.text += s.text.take();
  out.prompt_tokens = s.prompt_len();
  out.completion_tokens = static_cast<int64_t>(s.output.size());
  out.cached_tokens = s.cached;
  if (!reason.empty()) {
    out.stop_reason = s.text.stop_reason();
    finish(s, out, reason);
  }
}

void Scheduler::fail(Sequence& s, const std::string& why, Outputs& outs, std::exception_ptr cause) {
  if (s.finished) return;  // already finished this step
  RequestOutput out;
  out.error = why;
  out.cause = std::move(cause);
  finish(s, out, "error");
  outs.emplace_back(s.id, std::move(out));
}

void Scheduler::drop_cancelled(Outputs& outs) {
  if (cancelled_.empty()) return;
  std::unordered_set<int64_t> later;  // in a forward in flight: dropped once it is collected
  auto drop = [&](auto& list) {
    for (auto it = list.begin(); it != list.end();) {
      if (cancelled_.count((*it)->id) && (*it)->in_flight) {
        later.insert((*it)->id);
        ++it;
      } else if (cancelled_.count((*it)->id)) {
        RequestOutput out;
        out.text = (*it)->text.take();
        finish(**it, out, "abort");
        outs.emplace_back((*it)->id, std::move(out));
        it = list.erase(it);
      } else {
        ++it;
      }
    }
  };
  drop(waiting_);
  drop(running_);
  cancelled_ = std::move(later);
}

int64_t Scheduler::plan_running(std::vector<Planned>& plan, size_t cap) {
  int64_t budget = cfg_.max_num_batched_tokens;
  // Pipelined: a sequence in a forward in flight (or failed this step) waits for its logits.
  auto ready = [](const std::unique_ptr<Sequence>& s) { return !s->in_flight && s->kv >= 0; };
  std::vector<Sequence*> decoding;
  for (auto& s : running_)
    if (ready(s) && s->decoding() && plan.size() + decoding.size() < cap) decoding.push_back(s.get());
  const std::vector<int64_t> drafts =
      spec_on_ ? propose(decoding, budget) : std::vector<int64_t>(decoding.size(), 0);
  for (size_t i = 0; i < decoding.size(); ++i) {
    plan.push_back({decoding[i], 1 + drafts[i], true, drafts[i]});
    budget -= 1 + drafts[i];
  }
  for (auto& s : running_) {
    if (!ready(s) || s->decoding() || budget <= 0 || plan.size() >= cap) continue;
    const int64_t n = prefill_take(*s, budget);
    plan.push_back({s.get(), n, s->prefilled + n == s->prompt_len()});
    budget -= n;
  }
  return budget;
}

void Scheduler::admit_waiting(std::vector<Planned>& plan, int64_t budget, Outputs& outs, size_t cap) {
  const auto now = Clock::now();
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < cfg_.max_num_seqs &&
         plan.size() < cap) {
    std::unique_ptr<Sequence> s = std::move(waiting_.front());
    const size_t bytes = sequence_bytes(s->capacity());
    if (cfg_.kv_cache_bytes > 0 && reserved_ + bytes > cfg_.kv_cache_bytes) {  // FCFS: the head waits
      waiting_.front() = std::move(s);
      break;
    }
    // Cached blocks give way to sequences: every running sequence holds its own copy, so even a
    // referenced block may go (unreferenced ones first).
    if (cache_ && cfg_.kv_cache_bytes > 0) cache_->shrink_to(cfg_.kv_cache_bytes - reserved_ - bytes, true);
    waiting_.pop_front();
    s->scheduled = now;
    s->was_scheduled = true;
    try {
      s->kv = model_.allocate(s->capacity());
    } catch (const std::exception& e) {  // this request fails; the others are admitted as usual
      fail(*s, fmt::format("cannot allocate the sequence state: {}", e.what()), outs, std::current_exception());
      continue;
    }
    s->kv_bytes = bytes;
    reserved_ += bytes;
    if (cache_) {
      try {
        load_cached_prefix(*s);
      } catch (const std::exception& e) {
        fail(*s, fmt::format("cannot load the cached prefix: {}", e.what()), outs, std::current_exception());
        continue;
      }
    }
    const int64_t n = prefill_take(*s, budget);
    plan.push_back({s.get(), n, s->prefilled + n == s->prompt_len()});
    budget -= n;
    running_.push_back(std::move(s));
  }
}

std::vector<StepChunk> Scheduler::chunks_of(const std::vector<Planned>& plan, StepStats& st,
                                            std::vector<float>& logits) {
  const int64_t vocab = model_.vocab_size();
  size_t rows = 0;
  for (const auto& p : plan) rows += static_cast<size_t>(logit_rows(p));
  logits.resize(rows * static_cast<size_t>(vocab));
  std::vector<StepChunk> chunks;
  size_t row = 0;
  for (const auto& p : plan) {
    StepChunk c;
    c.seq = p.s->kv;
    c.n = p.n;
    if (p.s->decoding()) {
      c.tokens = p.drafts > 0 ? p.s->verify.data() : &p.s->output.back();
      c.all_logits = p.drafts > 0;
      c.rewindable = p.drafts > 0;
    } else {
      c.tokens = p.s->p.prompt.data() + p.s->prefilled;
      if (const PromptImages* im = p.s->p.images.get()) {
        c.embeds = im->embeds.data() + p.s->prefilled;
        if (!im->positions.empty()) c.positions = im->positions.data() + 3 * p.s->prefilled;
        if (!im->bidir_end.empty()) c.bidir_end = im->bidir_end.data() + p.s->prefilled;
      }
      c.all_logits = p.s->prompt_logits();
      st.prompt_tokens += p.n;
    }
    if (logit_rows(p) > 0) {
      c.logits = logits.data() + row * static_cast<size_t>(vocab);
      row += static_cast<size_t>(logit_rows(p));
    }
    chunks.push_back(c);
    last_batch_.emplace_back(p.s->id, p.n);
  }
  st.sequences = static_cast<int64_t>(plan.size());
  st.prefix_queries = step_queries_;
  st.prefix_hits = step_hits_;
  st.prompt_tokens += step_hits_;  // as vLLM counts them: a cached prompt token is a prompt token
  return chunks;
}

void Scheduler::sample_planned(const std::vector<Planned>& plan, const std::vector<StepChunk>& chunks, Outputs& outs,
                               StepStats& st) {
  const size_t vocab = static_cast<size_t>(model_.vocab_size());
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& s = *plan[i].s;
    float* logits = chunks[i].logits;  // the row to sample from (speculative verify: the first)
    if (!s.decoding()) {
      if (s.prompt_logits()) {
        try {
          collect_prompt_logprobs(s, plan[i].n, logits);
        } catch (const std::exception& e) {  // only this request fails
          fail(s, fmt::format("prompt logprobs failed: {}", e.what()), outs, std::current_exception());
          continue;
        }
        logits += static_cast<size_t>(plan[i].n - 1) * vocab;
      }
      s.prefilled += plan[i].n;
      if (cache_ && s.caching) {
        try {
          cache_computed_blocks(s);
        } catch (const std::exception& e) {  // the request goes on; only its blocks are not cached
          log().warn("prefix caching: request {}: {}", s.id, e.what());
          s.caching = false;
        }
      }
    }
    if (!plan[i].logits) continue;
    RequestOutput out;
    const int64_t drafts = plan[i].drafts;
    try {
      // Speculative verify: position j's logits decide the token after draft j (j = 0: after the
      // last sampled token); stop at the first rejection, or when the request finishes.
      int64_t accepted = 0;
      for (int64_t j = 0; j <= drafts; ++j) {
        const int32_t* draft = j < drafts ? &s.verify[static_cast<size_t>(j + 1)] : nullptr;
        sample_next(s, logits + static_cast<size_t>(j) * vocab, out, draft);
        st.generation_tokens += 1;
        if (s.finished || !draft || s.output.back() != *draft) break;
        ++accepted;
        if (static_cast<int64_t>(st.spec_accepted_per_pos.size()) <= j) st.spec_accepted_per_pos.resize(j + 1);
        ++st.spec_accepted_per_pos[static_cast<size_t>(j)];
      }
      if (drafts > 0) {
        st.spec_drafts += 1;
        st.spec_draft_tokens += drafts;
        st.spec_accepted_tokens += accepted;
        // The K/V of rejected drafts goes: the state keeps the last token and the accepted drafts.
        if (!s.finished && accepted < drafts)
          model_.rewind(s.kv, s.prompt_len() + static_cast<int64_t>(s.output.size()) - 1);
      }
    } catch (const std::exception& e) {  // only this request fails
      fail(s, fmt::format("sampling failed: {}", e.what()), outs, std::current_exception());
      continue;
    }
    outs.emplace_back(s.id, std::move(out));
  }
}

Scheduler::Outputs Scheduler::step() {
  Outputs outs;
  last_batch_.clear();
  drop_cancelled(outs);  // first: their slots and memory are free for this very step
  while (static_cast<int64_t>(in_flight_.size()) < depth_ && submit_group(outs)) {
  }
  if (!in_flight_.empty()) collect_group(outs);
  // (A sequence in flight is never finished: only collecting its group can end it.)
  std::erase_if(running_, [](const auto& s) { return s->kv < 0; });
  return outs;
}

size_t Scheduler::group_cap() const {
  if (depth_ <= 1) return SIZE_MAX;
  // About an equal share of the sequences that will run, so that N groups fill the pipeline.
  int64_t live = static_cast<int64_t>(waiting_.size());
  for (const auto& s : running_) live += s->kv >= 0;
  live = std::min(live, cfg_.max_num_seqs);
  return static_cast<size_t>(std::max<int64_t>(1, (live + depth_ - 1) / depth_));
}

bool Scheduler::submit_group(Outputs& outs) {
  step_queries_ = step_hits_ = 0;
  const size_t cap = group_cap();
  Group g;
  const int64_t budget = plan_running(g.plan, cap);
  admit_waiting(g.plan, budget, outs, cap);
  if (g.plan.empty()) return false;
  if (!spare_logits_.empty()) {
    g.logits = std::move(spare_logits_.back());
    spare_logits_.pop_back();
  }
  g.chunks = chunks_of(g.plan, g.st, g.logits);
  try {
    model_.submit(g.chunks);
  } catch (const std::exception& e) {
    // A model failure fails every sequence of the batch; the engine stays usable.
    for (const auto& p : g.plan) fail(*p.s, e.what(), outs, std::current_exception());
    spare_logits_.push_back(std::move(g.logits));
    return false;
  }
  for (const Planned& p : g.plan) p.s->in_flight = true;
  in_flight_.push_back(std::move(g));
  return true;
}

void Scheduler::collect_group(Outputs& outs) {
  Group& g = in_flight_.front();
  for (const Planned& p : g.plan) p.s->in_flight = false;
  try {
    model_.collect();
    sample_planned(g.plan, g.chunks, outs, g.st);
    if (obs_.on_step) obs_.on_step(g.st);
  } catch (const std::exception& e) {
    for (const auto& p : g.plan) fail(*p.s, e.what(), outs, std::current_exception());
  }
  spare_logits_.push_back(std::move(g.logits));
  in_flight_.pop_front();
}

Scheduler::Outputs Scheduler::fail_all(const std::string& why) {
  drain();  // the model's forwards in flight end before their requests do
  // The failed step's outputs never reached anyone, so every request still listed gets this one
  // (even one the step had just finished).
  Outputs outs;
  auto fail_each = [&](auto& list) {
    for (auto& s : list) {
      s->finished = false;
      fail(*s, why, outs);
    }
  };
  fail_each(running_);
  fail_each(waiting_);
  running_.clear();
  waiting_.clear();
  cancelled_.clear();
  return outs;
}

int64_t Scheduler::logit_rows(const Planned& p) const {
  if (p.s->prompt_logits()) return p.n;
  return p.logits ? 1 + p.drafts : 0;
}

void Scheduler::collect_prompt_logprobs(Sequence& s, int64_t n, const float* logits) {
  // Row j holds the logits after prompt position prefilled + j, which score the next prompt token.
  const int64_t vocab = model_.vocab_size();
  for (int64_t j = 0; j < n; ++j) {
    const int64_t next = s.prefilled + j + 1;
    if (next >= s.prompt_len()) break;  // the last row samples the first output token
    s.prompt_lps.push_back(token_logprob(logits + j * vocab, vocab, s.p.prompt[static_cast<size_t>(next)],
                                         s.p.prompt_logprobs));
  }
}

int64_t Scheduler::prefill_take(const Sequence& s, int64_t budget) const {
  int64_t n = prefill_take_unblocked(s, budget);
  // Gemma 3's image blocks attend both ways: a chunk never ends inside one. The cut moves back to
  // the block's start, or, when the chunk starts there, takes the block whole (over the budget,
  // as a block must run in one forward call).
  const PromptImages* im = s.p.images.get();
  if (im && !im->bidir_end.empty() && s.prefilled + n < s.prompt_len()) {
    const int64_t* be = im->bidir_end.data();
    const int64_t end = s.prefilled + n;
    int64_t cut = end;
    while (cut > s.prefilled && be[cut - 1] >= end) --cut;
    n = cut > s.prefilled ? cut - s.prefilled : be[s.prefilled] + 1 - s.prefilled;
  }
  return n;
}

int64_t Scheduler::prefill_take_unblocked(const Sequence& s, int64_t budget) const {
  int64_t n = std::min(s.prompt_len() - s.prefilled, budget);
  if (s.p.prompt_logprobs >= 0) {
    // The logits bound, in whole multiples of 64 rows when it allows that many.
    int64_t most = std::max<int64_t>(1, kPromptLogitsFloats / std::max<int64_t>(1, model_.vocab_size()));
    if (most >= 64) most = most / 64 * 64;
    n = std::min(n, most);
  }
  if (!cache_) return n;
  if (support_.max_chunk > 0) n = std::min(n, support_.max_chunk);
  if (support_.snapshot_grid > 0) {
    // A recurrent state can be saved only between forward calls: end a chunk at the prompt's last
    // snapshot point (the last multiple of the grid before its last token). The grid is a
    // multiple of the model's row alignment, so the cut changes no result.
    const int64_t g = support_.snapshot_grid, snap = (s.prompt_len() - 1) / g * g;
    if (s.prefilled < snap && s.prefilled + n > snap) n = snap - s.prefilled;
  }
  return n;
}

void Scheduler::load_cached_prefix(Sequence& s) {
  // Prompt logprobs need every prompt position's logits: such a request does not read the cache
  // (nor counts as a query), as in vLLM; its blocks still go into the cache.
  if (s.p.prompt_logprobs >= 0) return;
  // At least the last prompt token is computed: its logits give the first output token.
  std::vector<PrefixCache::BlockId> chain = cache_->match(s.cache_key(), s.prompt_len() - 1);
  if (support_.snapshot_grid > 0)  // a recurrent state resumes only where it was saved
    while (!chain.empty() && cache_->get(chain.back())->state.empty()) chain.pop_back();
  const int64_t hit = static_cast<int64_t>(chain.size()) * cache_->block_size();
  step_queries_ += s.prompt_len();
  prefix_queries_ += s.prompt_len();
  if (hit == 0) return;
  std::vector<const std::vector<uint8_t>*> blocks;
  for (PrefixCache::BlockId id : chain) blocks.push_back(&cache_->get(id)->kv);
  const PrefixCache::Block* last = cache_->get(chain.back());
  model_.load_positions(s.kv, blocks, cache_->block_size(), last->state.empty() ? nullptr : &last->state);
  cache_->acquire(chain);
  s.blocks = std::move(chain);
  s.prefilled = s.cached = hit;
  step_hits_ += hit;
  prefix_hits_ += hit;
}

bool Scheduler::make_room(size_t bytes) {
  if (cfg_.kv_cache_bytes == 0) return true;
  if (reserved_ + bytes > cfg_.kv_cache_bytes) return false;
  return cache_->shrink_to(cfg_.kv_cache_bytes - reserved_ - bytes, false);  // never a block in use
}

void Scheduler::cache_computed_blocks(Sequence& s) {
  const int64_t b_size = cache_->block_size();
  int64_t upto = s.prefilled, snap = -1;
  if (support_.snapshot_grid > 0) {  // past its snapshot point a hybrid's blocks could never be resumed from
    snap = (s.prompt_len() - 1) / support_.snapshot_grid * support_.snapshot_grid;
    upto = std::min(upto, snap);
  }
  for (int64_t b = static_cast<int64_t>(s.blocks.size()); (b + 1) * b_size <= upto; ++b) {
    const PrefixCache::BlockId parent = b == 0 ? PrefixCache::kNone : s.blocks.back();
    if (parent != PrefixCache::kNone && !cache_->contains(parent)) {  // evicted for an admission
      s.caching = false;
      return;
    }
    const std::span<const int32_t> tokens(s.cache_key().data() + b * b_size, static_cast<size_t>(b_size));
    const bool with_state = (b + 1) * b_size == snap && s.prefilled == snap;
    PrefixCache::BlockId id = cache_->find(parent, tokens);
    if (id != PrefixCache::kNone) {
      if (with_state && cache_->get(id)->state.empty() && make_room(support_.state_bytes)) {
        std::vector<uint8_t> kv, state;
        model_.save_positions(s.kv, b * b_size, b_size, kv, &state);
        cache_->add_state(id, std::move(state));
      }
    } else {
      if (!make_room(support_.block_bytes + (with_state ? support_.state_bytes : 0))) {
        s.caching = false;
        return;
      }
      std::vector<uint8_t> kv, state;
      model_.save_positions(s.kv, b * b_size, b_size, kv, with_state ? &state : nullptr);
      id = cache_->insert(parent, tokens, std::move(kv), std::move(state));
    }
    const PrefixCache::BlockId one[] = {id};
    cache_->acquire(one);
    s.blocks.push_back(id);
  }
}

std::vector<int64_t> Scheduler::propose(const std::vector<Sequence*>& seqs, int64_t budget) {
  std::vector<int64_t> n(seqs.size(), 0);
  // Drafts only from what the budget has left after one token for every decoding sequence.
  int64_t spare = budget - static_cast<int64_t>(seqs.size());
  std::vector<std::vector<int32_t>> histories;
  histories.reserve(seqs.size());  // the asks' spans point into it
  std::vector<StepModel::DraftAsk> asks;
  std::vector<size_t> who;
  const bool mtp = cfg_.speculative.method == "mtp";
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    // Not for structured outputs (the grammar would have to be rewound with the drafts). The
    // drafts and the token after them must fit the request's max_tokens (and so its state).
    const int64_t left = s.p.max_tokens - static_cast<int64_t>(s.output.size()) - 1;
    const int64_t k = std::min({cfg_.speculative.num_speculative_tokens, spare, left});
    if (k <= 0 || s.grammar) continue;
    std::vector<int32_t>& history = histories.emplace_back(s.p.prompt.begin(), s.p.prompt.end());
    history.insert(history.end(), s.output.begin(), s.output.end());
    if (mtp) {  // drafted below, all sequences in one pass of the head per position
      asks.push_back({s.kv, history, k});
      who.push_back(i);
      spare -= k;
      continue;
    }
    const std::vector<int32_t> d = propose_ngram(history, cfg_.speculative, k);
    n[i] = set_drafts(s, d);
    spare -= n[i];
  }
  if (!asks.empty()) {
    const std::vector<std::vector<int32_t>> d = model_.draft(asks);
    for (size_t a = 0; a < asks.size(); ++a) n[who[a]] = set_drafts(*seqs[who[a]], d[a]);
  }
  return n;
}

int64_t Scheduler::set_drafts(Sequence& s, const std::vector<int32_t>& d) {
  if (d.empty()) return 0;
  s.verify.assign(1, s.output.back());
  s.verify.insert(s.verify.end(), d.begin(), d.end());
  return static_cast<int64_t>(d.size());
}

}  // namespace fp4lm::engine
