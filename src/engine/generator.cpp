#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "engine/causal_lm_step_model.h"
#include "engine/scheduler.h"

namespace fp4lm::engine {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void add(GenerationResult& r, RequestOutput& out) {
  r.output_ids.insert(r.output_ids.end(), out.token_ids.begin(), out.token_ids.end());
  r.text += out.text;
  for (auto& lp : out.logprobs) r.logprobs.push_back(std::move(lp));
  if (!out.finished) return;
  if (out.finish_reason == "error") {
    if (out.cause) std::rethrow_exception(out.cause);  // its own type (NonFiniteError, ...)
    throw Error(out.error);
  }
  r.finish_reason = out.finish_reason;
  r.stop_reason = out.stop_reason;
  r.stop_token = out.stop_token;
}

}  // namespace

GenerationResult generate(StepModel& model, const tokenizer::Tokenizer* tok, RequestParams params,
                          const OutputCallback& on_output, const SpeculativeConfig& spec) {
  // One sequence, its whole prompt in the first step.
  SchedulerConfig cfg;
  cfg.max_num_seqs = 1;
  cfg.max_num_batched_tokens = std::max<int64_t>(1, model.max_model_len());
  cfg.speculative = spec;
  SchedulerObserver obs;
  GenerationResult* res = nullptr;
  obs.on_step = [&res](const StepStats& st) {
    res->draft_tokens += st.spec_draft_tokens;
    res->accepted_tokens += st.spec_accepted_tokens;
  };
  Scheduler sched(model, tok, cfg, obs);
  GenerationResult r;
  res = &r;
  r.prompt_ids = params.prompt;
  sched.add(0, std::move(params));  // RequestError: nothing ran

  bool prefilled = false;
  while (sched.has_work()) {
    const auto t0 = std::chrono::steady_clock::now();
    Scheduler::Outputs outs = sched.step();
    (prefilled ? r.decode_seconds : r.prefill_seconds) += seconds_since(t0);
    if (prefilled) ++r.decode_steps;
    const bool decoded = prefilled;
    prefilled = true;
    for (auto& [id, out] : outs) {
      if (decoded && out.finish_reason != "error") r.decode_tokens += static_cast<int64_t>(out.token_ids.size());
      if (on_output && out.finish_reason != "error") on_output(out);
      add(r, out);
    }
  }
  return r;
}

GenerationResult generate(const model::CausalLM& lm, const tokenizer::Tokenizer* tok, RequestParams params,
                          const OutputCallback& on_output, const SpeculativeConfig& spec) {
  CausalLmStepModel model(lm);
  return generate(model, tok, std::move(params), on_output, spec);
}

}  // namespace fp4lm::engine
