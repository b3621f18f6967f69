#pragma once
// Runs greedy requests through the Scheduler on a real CausalLM, with or without speculative
// decoding, collecting each request's tokens and logprobs and the step's draft counters; and the
// check that two runs gave the same tokens and bit-identical logprobs. Shared by the n-gram and
// MTP speculation tests.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include "engine/causal_lm_step_model.h"
#include "engine/scheduler.h"
#include "model/causal_lm.h"

namespace fp4lm::engine::spec_test {

struct SpecOut {
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, std::vector<TokenLogprob>> logprobs;
  int64_t drafts = 0, accepted = 0;
  int steps = 0;
};

// `c` with c.speculative as the run should speculate (method "" = not at all).
inline SpecOut run_requests(model::CausalLM& lm, const SchedulerConfig& c, const std::vector<std::vector<int32_t>>& prompts,
                            int64_t max_tokens) {
  CausalLmStepModel sm(lm);
  SpecOut o;
  SchedulerObserver obs;
  obs.on_step = [&](const StepStats& st) {
    o.drafts += st.spec_draft_tokens;
    o.accepted += st.spec_accepted_tokens;
  };
  Scheduler s(sm, nullptr, c, obs);
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestParams p;
    p.prompt = prompts[i];
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.logprobs = 2;
    s.add(static_cast<int64_t>(i), p);
  }
  while (s.has_work() && o.steps < 500) {
    for (auto& [id, out] : s.step()) {
      EXPECT_NE(out.finish_reason, "error") << out.error;
      o.tokens[id].insert(o.tokens[id].end(), out.token_ids.begin(), out.token_ids.end());
      o.logprobs[id].insert(o.logprobs[id].end(), out.logprobs.begin(), out.logprobs.end());
    }
    ++o.steps;
  }
  return o;
}

// The same tokens, and every logprob equal bit for bit.
inline void expect_same_greedy_run(const SpecOut& got, const SpecOut& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  for (const auto& [id, lps] : want.logprobs) {
    const auto& g = got.logprobs.at(id);
    ASSERT_EQ(g.size(), lps.size()) << what;
    for (size_t t = 0; t < lps.size(); ++t)
      EXPECT_EQ(std::memcmp(&g[t].logprob, &lps[t].logprob, sizeof(float)), 0) << what << " request " << id << " token " << t;
  }
}

}  // namespace fp4lm::engine::spec_test
