// Penalties, masks and logprobs with vLLM's semantics, against hand-computed rows.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/logits_processing.h"

namespace fp4lm::engine::logits_processing_test {
namespace {

TEST(LogitsProcessing, RepetitionFrequencyAndPresencePenalties) {
  std::vector<float> row = {2.0f, -1.0f, 4.0f, 1.0f};
  RequestParams p;
  p.repetition_penalty = 2.0;
  p.frequency_penalty = 0.5;
  p.presence_penalty = 0.25;
  PenaltyState s;
  s.prompt = {0, 1};
  s.output_counts = {{1, 2}, {2, 1}};
  apply_penalties(row.data(), 4, p, s);
  EXPECT_FLOAT_EQ(row[0], 1.0f);                      // prompt only: 2 / 2
  EXPECT_FLOAT_EQ(row[1], -2.0f - 0.5f * 2 - 0.25f);  // negative: × 2, then penalties
  EXPECT_FLOAT_EQ(row[2], 2.0f - 0.5f - 0.25f);       // output once
  EXPECT_FLOAT_EQ(row[3], 1.0f);                      // unseen
}

TEST(LogitsProcessing, MaskAndLogprobs) {
  std::vector<float> row = {0.0f, 1.0f, 2.0f, 3.0f};
  mask_ids(row.data(), 4, {3, 17});
  EXPECT_TRUE(std::isinf(row[3]) && row[3] < 0);
  const std::vector<float> raw = {0.0f, 1.0f, 2.0f, 2.0f};
  TokenLogprob lp = token_logprob(raw.data(), 4, 1, 3);
  const double lse = std::log(1 + std::exp(1.0) + 2 * std::exp(2.0));
  EXPECT_NEAR(lp.logprob, 1.0 - lse, 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 2);  // tie broken by the lower id
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 1);
  EXPECT_NEAR(lp.top[0].second, 2.0 - lse, 1e-6);
}

TEST(LogitsProcessing, LogitBiasAddsAndIsValidated) {
  std::vector<float> row = {0.0f, 1.0f, 2.0f};
  apply_logit_bias(row.data(), 3, {{0, 100.0f}, {2, -0.5f}});
  EXPECT_FLOAT_EQ(row[0], 100.0f);
  EXPECT_FLOAT_EQ(row[1], 1.0f);
  EXPECT_FLOAT_EQ(row[2], 1.5f);
  RequestParams p;
  p.prompt = {1};
  p.max_tokens = 1;
  p.logit_bias = {{3, 1.0f}};
  EXPECT_THROW(validate(p, RequestLimits{3, 8}), RequestError);
  p.logit_bias = {{1, 101.0f}};
  EXPECT_THROW(validate(p, RequestLimits{3, 8}), RequestError);
  p.logit_bias = {{2, -100.0f}};
  EXPECT_NO_THROW(validate(p, RequestLimits{3, 8}));
}

TEST(LogitsProcessing, AllowedTokenIdsKeepOnlyThoseLogits) {
  std::vector<float> row = {0.5f, 1.0f, 2.0f, 3.0f};
  allow_only(row.data(), 4, {1, 2, 9});  // 9: outside the row, left alone
  EXPECT_TRUE(std::isinf(row[0]) && row[0] < 0);
  EXPECT_FLOAT_EQ(row[1], 1.0f);
  EXPECT_FLOAT_EQ(row[2], 2.0f);
  EXPECT_TRUE(std::isinf(row[3]) && row[3] < 0);
  RequestParams p;
  p.prompt = {1};
  p.max_tokens = 1;
  p.allowed_token_ids = {0, 4};
  EXPECT_THROW(validate(p, RequestLimits{4, 8}), RequestError);
  p.allowed_token_ids = {0, 3};
  EXPECT_NO_THROW(validate(p, RequestLimits{4, 8}));
}

TEST(LogitsProcessing, LogprobTokenIdsAndTheLogprobsCap) {
  const std::vector<float> raw = {0.0f, 1.0f, 2.0f, 2.0f};
  const double lse = std::log(1 + std::exp(1.0) + 2 * std::exp(2.0));
  TokenLogprob lp = token_logprob_of(raw.data(), 4, 2, {0, 3, 0});
  EXPECT_NEAR(lp.logprob, 2.0 - lse, 1e-6);
  EXPECT_EQ(lp.rank, 2);  // ties count (vLLM's rank)
  ASSERT_EQ(lp.top.size(), 2u);  // in the listed order, a repeated id once
  EXPECT_EQ(lp.top[0].first, 0);
  EXPECT_NEAR(lp.top[0].second, 0.0 - lse, 1e-6);
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_NEAR(lp.top[1].second, 2.0 - lse, 1e-6);
  RequestParams p;
  p.prompt = {1};
  p.max_tokens = 1;
  p.logprobs = 4;  // the whole vocabulary of 4, under the default cap
  EXPECT_NO_THROW(validate(p, RequestLimits{4, 8}));
  p.logprobs = 21;
  EXPECT_THROW(validate(p, RequestLimits{100, 8}), RequestError);
  EXPECT_NO_THROW(validate(p, RequestLimits{100, 8, -1}));  // --max-logprobs -1: no cap
  EXPECT_THROW(validate(p, RequestLimits{100, 8, 10}), RequestError);
  p.logprobs = 3;
  p.logprob_token_ids = {1, 4};
  EXPECT_THROW(validate(p, RequestLimits{4, 8}), RequestError);  // 4 is outside the vocabulary
  p.logprob_token_ids.assign(129, 1);
  EXPECT_THROW(validate(p, RequestLimits{4, 8}), RequestError);  // more than vLLM's 128
}

}  // namespace
}  // namespace fp4lm::engine::logits_processing_test
