// Speculative decoding with the MTP head (method "mtp", engine/mtp_drafter.h) on the tiny
// Qwen3.5 hybrids of tests/model/hybrid_reference.h with a head: a batch of greedy requests gives
// the same tokens and bit-identical logprobs with and without speculation, with drafts verified
// (and the hybrid's recurrent state rewound past the rejected ones); the drafter's state follows
// prompts, verify steps and rewinds; prefix caching is off with a head.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "common/paths.h"
#include "engine/causal_lm_step_model.h"
#include "engine/scheduler.h"
#include "model/causal_lm.h"
#include "model/hybrid_reference.h"

namespace fp4lm::engine {
namespace {

using namespace model::hybrid_ref;

struct Out {
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, std::vector<TokenLogprob>> logprobs;
  int64_t drafts = 0, accepted = 0;
  int steps = 0;
};

Out run(model::CausalLM& lm, int64_t k, const std::vector<std::vector<int32_t>>& prompts) {
  CausalLmStepModel sm(lm);
  SchedulerConfig c;
  c.max_num_seqs = 3;
  c.max_num_batched_tokens = 16;
  if (k > 0) {
    c.speculative.method = "mtp";
    c.speculative.num_speculative_tokens = k;
  }
  Out o;
  SchedulerObserver obs;
  obs.on_step = [&](const StepStats& st) {
    o.drafts += st.spec_draft_tokens;
    o.accepted += st.spec_accepted_tokens;
  };
  Scheduler s(sm, nullptr, c, obs);
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestParams p;
    p.prompt = prompts[i];
    p.max_tokens = 20;
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

class MtpSpeculation : public ::testing::TestWithParam<Family> {};

TEST_P(MtpSpeculation, GreedyTokensAndLogprobsEqualThoseWithoutSpeculation) {
  Hybrid m = make_hybrid(2, 11, GetParam());
  add_mtp(m);
  fp4lm::test::TempDir dir;
  write_hybrid(m, dir.path());
  model::LoadOptions lo;
  lo.max_model_len = 64;
  lo.progress = false;
  lo.mtp = true;
  auto lm = model::CausalLM::load(dir.path().string(), f32(), lo);
  // A prompt longer than a step's budget, so the head catches up over a prompt prefilled in pieces.
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}, {11, 12, 11}, {3, 9, 27, 3}};
  const Out plain = run(*lm, 0, prompts);
  for (int64_t k : {1, 3}) {
    const Out spec = run(*lm, k, prompts);
    EXPECT_EQ(spec.tokens, plain.tokens) << "k " << k;
    for (const auto& [id, lps] : plain.logprobs) {
      const auto& got = spec.logprobs.at(id);
      ASSERT_EQ(got.size(), lps.size());
      for (size_t t = 0; t < lps.size(); ++t)
        EXPECT_EQ(std::memcmp(&got[t].logprob, &lps[t].logprob, sizeof(float)), 0)
            << "k " << k << " request " << id << " token " << t;
    }
    EXPECT_GT(spec.drafts, 20) << "the head drafted for every decoding sequence";
    std::printf("[ k=%lld ] draft tokens %lld, accepted %lld; steps %d (plain %d)\n", static_cast<long long>(k),
                static_cast<long long>(spec.drafts), static_cast<long long>(spec.accepted), spec.steps, plain.steps);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, MtpSpeculation, ::testing::Values(Family::qwen3_5_moe, Family::qwen3_next),
                         [](const auto& info) { return info.param == Family::qwen3_5_moe ? "Qwen35Moe" : "Qwen3Next"; });

TEST(MtpSpeculation, PrefixCachingIsOffWithAHeadAndTheMethodNeedsOne) {
  Hybrid m = make_hybrid(2);
  add_mtp(m);
  fp4lm::test::TempDir dir;
  write_hybrid(m, dir.path());
  model::LoadOptions lo;
  lo.max_model_len = 64;
  lo.progress = false;
  lo.mtp = true;
  auto lm = model::CausalLM::load(dir.path().string(), f32(), lo);
  CausalLmStepModel with_head(*lm);
  EXPECT_NE(with_head.prefix_support(16).unsupported.find("MTP"), std::string::npos);
  lo.mtp = false;
  auto plain = model::CausalLM::load(dir.path().string(), f32(), lo);
  CausalLmStepModel without(*plain);
  EXPECT_FALSE(without.can_draft());
  SchedulerConfig c;
  c.speculative.method = "mtp";
  c.speculative.num_speculative_tokens = 2;
  try {
    Scheduler s(without, nullptr, c);
    FAIL() << "method mtp without a head";
  } catch (const RequestError& e) {
    EXPECT_NE(std::string(e.what()).find("MTP head"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4lm::engine
