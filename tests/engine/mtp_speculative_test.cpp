// Speculative decoding with the MTP head (method "mtp", engine/mtp_drafter.h) on the tiny
// Qwen3.5 hybrids of tests/reference/hybrid_reference.h with a head: a batch of greedy requests gives
// the same tokens and bit-identical logprobs with and without speculation, with drafts verified
// (and the hybrid's recurrent state rewound past the rejected ones); the drafter's state follows
// prompts, verify steps and rewinds; prefix caching is off with a head.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/paths.h"
#include "engine/speculative_run.h"
#include "model/causal_lm.h"
#include "reference/hybrid_reference.h"

namespace fp4lm::engine::mtp_speculative_test {
namespace {

using namespace model::hybrid_ref;

using spec_test::SpecOut;

// Loads the hybrid `m` (with its head unless `head` is false) from a fresh directory.
std::unique_ptr<model::CausalLM> load(const Hybrid& m, const fp4lm::test::TempDir& dir, bool head = true) {
  write_hybrid(m, dir.path());
  model::LoadOptions lo;
  lo.max_model_len = 64;
  lo.progress = false;
  lo.mtp = head;
  return model::CausalLM::load(dir.path().string(), f32(), lo);
}

SpecOut run(model::CausalLM& lm, int64_t k, const std::vector<std::vector<int32_t>>& prompts) {
  SchedulerConfig c;
  c.max_num_seqs = 3;
  c.max_num_batched_tokens = 16;
  if (k > 0) {
    c.speculative.method = "mtp";
    c.speculative.num_speculative_tokens = k;
  }
  return spec_test::run_requests(lm, c, prompts, 20);
}

class MtpSpeculation : public ::testing::TestWithParam<Family> {};

TEST_P(MtpSpeculation, GreedyTokensAndLogprobsEqualThoseWithoutSpeculation) {
  Hybrid m = make_hybrid(2, 11, GetParam());
  add_mtp(m);
  fp4lm::test::TempDir dir;
  auto lm = load(m, dir);
  // A prompt longer than a step's budget, so the head catches up over a prompt prefilled in pieces.
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}, {11, 12, 11}, {3, 9, 27, 3}};
  const SpecOut plain = run(*lm, 0, prompts);
  for (int64_t k : {1, 3}) {
    const SpecOut spec = run(*lm, k, prompts);
    spec_test::expect_same_greedy_run(spec, plain, "k " + std::to_string(k));
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
  fp4lm::test::TempDir dir, plain_dir;
  auto lm = load(m, dir);
  CausalLmStepModel with_head(*lm);
  EXPECT_NE(with_head.prefix_support(16).unsupported.find("MTP"), std::string::npos);
  auto plain = load(m, plain_dir, /*head=*/false);
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
}  // namespace fp4lm::engine::mtp_speculative_test
