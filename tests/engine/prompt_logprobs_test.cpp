// prompt_logprobs on real tiny models: every prompt token's logprob, rank and top k equal a
// log-softmax (in double) of one whole-prompt forward's logits, with the prompt prefilled in
// several chunks and the prefix cache on (a request with prompt_logprobs reads no cached blocks,
// yet leaves its own for others); the generated tokens are those of the same request without them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "reference/logits_check.h"
#include "reference/tiny_models.h"
#include "common/paths.h"
#include "engine/causal_lm_step_model.h"
#include "engine/scheduler.h"
#include "model/causal_lm.h"
#include "reference/hybrid_reference.h"

namespace fp4lm::engine::prompt_logprobs_test {
namespace {

struct Result {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> prompt_lps;
  int64_t cached = 0;
};

struct Case {
  std::string name, arch;
};

class PromptLogprobs : public ::testing::TestWithParam<Case> {};

TEST_P(PromptLogprobs, EqualALogSoftmaxOfTheWholePromptsLogitsWithChunkedPrefillAndPrefixCaching) {
  const Case& c = GetParam();
  fp4lm::test::TempDir dir;
  if (c.arch == "hybrid") model::hybrid_ref::write_hybrid(model::hybrid_ref::make_hybrid(2), dir.path());
  else fp4lm::test::write_tiny_model(fp4lm::test::make_tiny_model(c.arch), dir.path());
  model::EngineOptions o;
  o.dtype = "float32";
  model::LoadOptions lo;
  lo.max_model_len = 64;
  lo.progress = false;
  auto lm = model::CausalLM::load(dir.path().string(), o, lo);
  const int64_t vocab = lm->vocab_size();
  const std::vector<int32_t> prompt = {5, 17, 3, 40, 41, 9, 9, 27, 2, 33, 12, 8, 19, 44, 6, 21, 7, 30, 11};
  const int64_t k = 3;

  CausalLmStepModel sm(*lm);
  SchedulerConfig cfg;
  cfg.max_num_seqs = 2;
  cfg.max_num_batched_tokens = 6;  // the prompt takes several prefill chunks
  cfg.enable_prefix_caching = true;
  cfg.block_size = 4;
  Scheduler s(sm, nullptr, cfg);
  auto run = [&](int64_t id, int64_t prompt_logprobs) {
    RequestParams p;
    p.prompt = prompt;
    p.max_tokens = 4;
    p.ignore_eos = true;
    p.prompt_logprobs = prompt_logprobs;
    s.add(id, p);
    Result r;
    for (int steps = 0; s.has_work() && steps < 100; ++steps)
      for (auto& [rid, out] : s.step()) {
        EXPECT_NE(out.finish_reason, "error") << out.error;
        EXPECT_TRUE(out.prompt_logprobs.empty() || r.tokens.empty()) << "prompt logprobs come with the first token";
        r.tokens.insert(r.tokens.end(), out.token_ids.begin(), out.token_ids.end());
        r.prompt_lps.insert(r.prompt_lps.end(), out.prompt_logprobs.begin(), out.prompt_logprobs.end());
        r.cached = std::max(r.cached, out.cached_tokens);
      }
    return r;
  };
  const Result first = run(0, k);
  const Result again = run(1, k);    // the same prompt, now in the cache
  const Result plain = run(2, -1);   // without prompt logprobs: reads the cache
  const Result zero = run(3, 0);

  // The reference: one forward over the whole prompt, log-softmax in double.
  const std::vector<float> logits = model::all_logits(*lm, prompt);
  ASSERT_EQ(first.prompt_lps.size(), prompt.size() - 1);
  for (size_t i = 1; i < prompt.size(); ++i) {
    const float* row = logits.data() + (i - 1) * static_cast<size_t>(vocab);
    double mx = -INFINITY, sum = 0;
    for (int64_t t = 0; t < vocab; ++t) mx = std::max(mx, static_cast<double>(row[t]));
    for (int64_t t = 0; t < vocab; ++t) sum += std::exp(static_cast<double>(row[t]) - mx);
    std::vector<double> lp(static_cast<size_t>(vocab));
    for (int64_t t = 0; t < vocab; ++t) lp[static_cast<size_t>(t)] = row[t] - mx - std::log(sum);
    const TokenLogprob& got = first.prompt_lps[i - 1];
    EXPECT_EQ(got.id, prompt[i]);
    EXPECT_NEAR(got.logprob, lp[static_cast<size_t>(prompt[i])], 1e-4) << "prompt token " << i;
    const int64_t rank = std::count_if(lp.begin(), lp.end(), [&](double v) { return v >= lp[static_cast<size_t>(prompt[i])]; });
    EXPECT_EQ(got.rank, rank) << "prompt token " << i;
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    for (int64_t t = 0; t < vocab; ++t) order[static_cast<size_t>(t)] = static_cast<int32_t>(t);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return lp[a] > lp[b]; });
    ASSERT_EQ(got.top.size(), static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      EXPECT_EQ(got.top[j].first, order[j]) << "prompt token " << i << " top " << j;
      EXPECT_NEAR(got.top[j].second, lp[static_cast<size_t>(order[j])], 1e-4);
    }
  }
  // A cached prompt is computed again for its logprobs: the same values, no cached tokens.
  EXPECT_EQ(again.cached, 0);
  ASSERT_EQ(again.prompt_lps.size(), first.prompt_lps.size());
  for (size_t i = 0; i < first.prompt_lps.size(); ++i) {
    EXPECT_EQ(again.prompt_lps[i].logprob, first.prompt_lps[i].logprob);
    EXPECT_EQ(again.prompt_lps[i].top, first.prompt_lps[i].top);
  }
  // (The hybrid's state snapshots fall on multiples of its row alignment, beyond this prompt.)
  if (c.arch != "hybrid") {
    EXPECT_GT(plain.cached, 0) << "the prompt-logprobs requests cached their blocks";
  }
  EXPECT_TRUE(plain.prompt_lps.empty());
  EXPECT_EQ(first.tokens, plain.tokens);
  EXPECT_EQ(again.tokens, plain.tokens);
  ASSERT_EQ(zero.prompt_lps.size(), prompt.size() - 1);  // k = 0: the prompt token alone
  for (size_t i = 0; i < zero.prompt_lps.size(); ++i) {
    EXPECT_TRUE(zero.prompt_lps[i].top.empty());
    EXPECT_EQ(zero.prompt_lps[i].logprob, first.prompt_lps[i].logprob);
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, PromptLogprobs,
                         ::testing::Values(Case{"Llama", "LlamaForCausalLM"}, Case{"Qwen3Moe", "Qwen3MoeForCausalLM"},
                                           Case{"Qwen35MoeHybrid", "hybrid"}),
                         [](const auto& info) { return info.param.name; });

TEST(PromptLogprobsParams, AreBoundedLikeLogprobs) {
  RequestParams p;
  p.prompt = {1, 2};
  p.prompt_logprobs = kMaxLogprobs + 1;
  try {
    validate(p, RequestLimits{32, 64});
    FAIL() << "expected a RequestError";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param, "prompt_logprobs");
  }
  p.prompt_logprobs = -2;
  EXPECT_THROW(validate(p, RequestLimits{32, 64}), RequestError);
  p.prompt_logprobs = kMaxLogprobs;
  EXPECT_NO_THROW(validate(p, RequestLimits{32, 64}));
}

}  // namespace
}  // namespace fp4lm::engine::prompt_logprobs_test
