#pragma once
// Concurrent streams vs each stream alone: every prompt's greedy tokens from engine::generate on
// its own, and the same prompts all added at once to a Scheduler over the model (one batched
// forward per step, prompts split across steps and mixed with decodes, as `fp4lm serve` runs them).
#include <algorithm>
#include <map>
#include <vector>

#include "engine/causal_lm_step_model.h"
#include "engine/generator.h"
#include "engine/scheduler.h"
#include "model/causal_lm.h"

namespace fp4lm::test {

struct StreamsRun {
  std::vector<std::vector<int32_t>> alone;              // per prompt, generated alone
  std::map<int64_t, std::vector<int32_t>> together;     // per request id (= prompt index), scheduled together
  size_t widest = 0;                                    // the most sequences one step's forward held
  bool drained = false;                                 // the scheduler finished every request
  size_t kv_reserved_after = 0;                         // KV bytes still reserved once drained
};

inline StreamsRun run_streams_alone_and_together(model::CausalLM& lm, const std::vector<std::vector<int32_t>>& prompts,
                                                 const engine::SchedulerConfig& cfg, int max_tokens = 10, int max_steps = 300) {
  StreamsRun r;
  for (const auto& p : prompts) {
    engine::RequestParams gp;
    gp.prompt = p;
    gp.max_tokens = max_tokens;
    gp.ignore_eos = true;
    r.alone.push_back(engine::generate(lm, nullptr, gp).output_ids);
  }
  engine::CausalLmStepModel sm(lm);
  engine::Scheduler s(sm, nullptr, cfg);
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::RequestParams p;
    p.prompt = prompts[i];
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    s.add(static_cast<int64_t>(i), p);
  }
  for (int step = 0; step < max_steps && s.has_work(); ++step) {
    for (auto& [id, out] : s.step())
      r.together[id].insert(r.together[id].end(), out.token_ids.begin(), out.token_ids.end());
    r.widest = std::max(r.widest, s.last_batch().size());
  }
  r.drained = !s.has_work();
  r.kv_reserved_after = s.kv_reserved_bytes();
  return r;
}

}  // namespace fp4lm::test
