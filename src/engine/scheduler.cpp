#include "engine/scheduler.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "engine/logits_processing.h"
#include "engine/sampler.h"
#include "engine/structured/grammar_error.h"
#include "engine/text_stream.h"

namespace fp4lm::engine {

namespace {
double seconds(Scheduler::Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

struct Scheduler::Sequence {
  int64_t id = 0;
  RequestParams p;
  int64_t kv = -1;         // StepModel sequence id once admitted
  size_t kv_bytes = 0;
  int64_t prefilled = 0;   // prompt tokens already run
  std::vector<int32_t> output;
  Sampler sampler;
  TextStream text;
  PenaltyState penalties;
  std::optional<structured::GrammarMatcher> grammar;  // structured outputs
  std::vector<int64_t> stop_ids;  // EOS (unless ignore_eos) + stop_token_ids
  Clock::time_point arrival, scheduled, first_token, last_token;
  bool was_scheduled = false;
  std::vector<double> itl;

  Sequence(int64_t id_, RequestParams params, const tokenizer::Tokenizer* tok, const std::vector<int64_t>& eos)
      : id(id_), p(std::move(params)), sampler(p.sampling), text(tok, p.stop, p.skip_special_tokens) {
    if (!p.ignore_eos) stop_ids = eos;
    stop_ids.insert(stop_ids.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
    if (p.repetition_penalty != 1) penalties.prompt.insert(p.prompt.begin(), p.prompt.end());
  }
  int64_t prompt_len() const { return static_cast<int64_t>(p.prompt.size()); }
  bool decoding() const { return prefilled == prompt_len(); }
  int64_t capacity() const { return prompt_len() + p.max_tokens; }
  bool is_stop_id(int32_t t) const { return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end(); }
};

Scheduler::Scheduler(StepModel& model, const tokenizer::Tokenizer* tok, SchedulerConfig cfg, SchedulerObserver obs)
    : model_(model), tok_(tok), cfg_(cfg), obs_(std::move(obs)), eos_(model.eos_ids()) {
  if (cfg_.max_num_seqs < 1) usage_fail("--max-num-seqs must be >= 1 (got {})", cfg_.max_num_seqs);
  if (cfg_.max_num_batched_tokens < cfg_.max_num_seqs)
    usage_fail("--max-num-batched-tokens ({}) must be >= --max-num-seqs ({})", cfg_.max_num_batched_tokens,
               cfg_.max_num_seqs);
}

Scheduler::~Scheduler() {
  for (auto& s : running_) model_.release(s->kv);
}

structured::GrammarCompiler& Scheduler::grammars() const {
  std::call_once(grammars_once_, [this] {
    grammars_ = std::make_unique<structured::GrammarCompiler>(
        std::make_shared<structured::TokenVocabulary>(*tok_, model_.vocab_size()));
  });
  return *grammars_;
}

void Scheduler::check(const RequestParams& p) const {
  validate(p, model_.vocab_size());
  if (p.structured.active()) {
    if (!tok_) throw RequestError("structured outputs need the model's tokenizer", p.structured.param);
    try {
      grammars().compile(p.structured);
    } catch (const structured::GrammarError& e) {
      throw RequestError(e.what(), p.structured.param);
    }
  }
  const int64_t len = model_.max_model_len();
  const int64_t prompt = static_cast<int64_t>(p.prompt.size());
  if (prompt >= len)
    throw RequestError(fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} "
                                   "tokens, which leaves no room for generated tokens.",
                                   len, prompt),
                       "prompt");
  if (prompt + p.max_tokens > len)
    throw RequestError(fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                   "tokens ({} in the prompt, {} for the completion). Please reduce the length of "
                                   "the prompt or the completion.",
                                   len, prompt + p.max_tokens, prompt, p.max_tokens),
                       "max_tokens");
  const size_t need = model_.bytes_for(prompt + p.max_tokens);
  if (cfg_.kv_cache_bytes > 0 && need > cfg_.kv_cache_bytes)
    throw RequestError(fmt::format("this request needs {} bytes of KV cache ({} prompt + {} completion tokens), "
                                   "more than the whole budget of {} bytes (--kv-cache-memory)",
                                   need, prompt, p.max_tokens, cfg_.kv_cache_bytes),
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

void Scheduler::finish(Sequence& s, RequestOutput& out, const std::string& reason) {
  out.finished = true;
  out.finish_reason = reason;
  out.prompt_tokens = s.prompt_len();
  out.completion_tokens = static_cast<int64_t>(s.output.size());
  if (s.kv >= 0) {
    model_.release(s.kv);
    reserved_ -= s.kv_bytes;
    s.kv = -1;
  }
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

void Scheduler::sample_next(Sequence& s, float* logits, RequestOutput& out) {
  const int64_t vocab = model_.vocab_size();
  // Logprobs come from the raw logits: keep them before masking and penalties change the row.
  if (s.p.logprobs >= 0) raw_.assign(logits, logits + vocab);
  if (static_cast<int64_t>(s.output.size()) < s.p.min_tokens) mask_ids(logits, vocab, s.stop_ids);
  if (has_penalties(s.p)) apply_penalties(logits, vocab, s.p, s.penalties);
  if (s.grammar) s.grammar->apply(logits, vocab, s.stop_ids);
  const int32_t tok = s.sampler.sample(logits, vocab);
  if (s.grammar && !s.is_stop_id(tok)) s.grammar->accept(tok);
  s.output.push_back(tok);
  ++s.penalties.output_counts[tok];
  const auto now = Clock::now();
  if (s.output.size() == 1) s.first_token = now;
  else s.itl.push_back(seconds(now - s.last_token));
  s.last_token = now;
  out.token_ids.push_back(tok);
  if (s.p.logprobs >= 0) out.logprobs.push_back(token_logprob(raw_.data(), vocab, tok, s.p.logprobs));

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
  if (!reason.empty()) {
    out.stop_reason = s.text.stop_reason();
    finish(s, out, reason);
  }
}

std::vector<std::pair<int64_t, RequestOutput>> Scheduler::step() {
  std::vector<std::pair<int64_t, RequestOutput>> outs;
  last_batch_.clear();
  // Cancellations first: their slots and memory are free for this very step.
  if (!cancelled_.empty()) {
    auto drop = [&](auto& list) {
      for (auto it = list.begin(); it != list.end();) {
        if (cancelled_.count((*it)->id)) {
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
    cancelled_.clear();
  }

  struct Planned {
    Sequence* s;
    int64_t n;
    bool logits;
  };
  std::vector<Planned> plan;
  int64_t budget = cfg_.max_num_batched_tokens;
  for (auto& s : running_)
    if (s->decoding()) {
      plan.push_back({s.get(), 1, true});
      --budget;
    }
  for (auto& s : running_) {
    if (s->decoding() || budget <= 0) continue;
    const int64_t n = std::min(s->prompt_len() - s->prefilled, budget);
    plan.push_back({s.get(), n, s->prefilled + n == s->prompt_len()});
    budget -= n;
  }
  const auto now = Clock::now();
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < cfg_.max_num_seqs) {
    Sequence& s = *waiting_.front();
    const size_t bytes = model_.bytes_for(s.capacity());
    if (cfg_.kv_cache_bytes > 0 && reserved_ + bytes > cfg_.kv_cache_bytes) break;  // FCFS: the head waits
    s.kv = model_.allocate(s.capacity());
    s.kv_bytes = bytes;
    reserved_ += bytes;
    s.scheduled = now;
    s.was_scheduled = true;
    const int64_t n = std::min(s.prompt_len(), budget);
    plan.push_back({&s, n, n == s.prompt_len()});
    budget -= n;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  if (plan.empty()) return outs;

  const int64_t vocab = model_.vocab_size();
  size_t rows = 0;
  for (const auto& p : plan) rows += p.logits;
  logits_.resize(rows * static_cast<size_t>(vocab));
  std::vector<StepChunk> chunks;
  StepStats st;
  size_t row = 0;
  for (const auto& p : plan) {
    StepChunk c;
    c.seq = p.s->kv;
    c.n = p.n;
    if (p.s->decoding()) {
      c.tokens = &p.s->output.back();
    } else {
      c.tokens = p.s->p.prompt.data() + p.s->prefilled;
      st.prompt_tokens += p.n;
    }
    if (p.logits) c.logits = logits_.data() + (row++) * static_cast<size_t>(vocab);
    chunks.push_back(c);
    last_batch_.emplace_back(p.s->id, p.n);
  }
  st.sequences = static_cast<int64_t>(plan.size());
  try {
    model_.forward(chunks);
  } catch (const std::exception& e) {
    // A model failure fails every sequence of the batch; the engine stays usable.
    for (const auto& p : plan) {
      RequestOutput out;
      out.error = e.what();
      finish(*p.s, out, "error");
      outs.emplace_back(p.s->id, std::move(out));
    }
    std::erase_if(running_, [](const auto& s) { return s->kv < 0; });
    return outs;
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& s = *plan[i].s;
    if (!s.decoding()) s.prefilled += plan[i].n;
    if (!chunks[i].logits) continue;
    RequestOutput out;
    sample_next(s, chunks[i].logits, out);
    st.generation_tokens += 1;
    outs.emplace_back(s.id, std::move(out));
  }
  if (obs_.on_step) obs_.on_step(st);
  std::erase_if(running_, [](const auto& s) { return s->kv < 0; });
  return outs;
}

}  // namespace fp4lm::engine
