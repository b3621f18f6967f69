// The scheduler on a real (tiny random) model through CausalLmStepModel: one batched forward
// per step, and every request's greedy tokens equal engine::generate's for it alone, whatever
// else is in the batch and however its prompt is chunked.
#include <gtest/gtest.h>

#include "reference/tiny_models.h"
#include "common/paths.h"
#include "streams_check.h"

namespace fp4lm::engine::serving_batch_test {
namespace {

class ServingBatch : public ::testing::TestWithParam<std::string> {};

TEST_P(ServingBatch, GreedyTokensEqualGenerateAloneWhateverTheBatch) {
  fp4lm::test::TempDir dir;
  fp4lm::test::write_tiny_model(fp4lm::test::make_tiny_model(GetParam()), dir.path());
  model::EngineOptions o;
  o.dtype = "float32";
  model::LoadOptions lo;
  lo.max_model_len = 48;
  auto lm = model::CausalLM::load(dir.path().string(), o, lo);

  std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {3}, {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 2, 4}, {11, 12}, {6, 1, 8, 3, 5}};
  SchedulerConfig cfg;
  cfg.max_num_seqs = 4;
  cfg.max_num_batched_tokens = 6;  // prompts are split across steps and mixed with decodes
  const fp4lm::test::StreamsRun r = fp4lm::test::run_streams_alone_and_together(*lm, prompts, cfg, 10, 200);
  ASSERT_TRUE(r.drained);
  EXPECT_GE(r.widest, 3u) << "several sequences shared a forward";
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(r.together.at(static_cast<int64_t>(i)), r.alone[i]) << "request " << i;
  EXPECT_EQ(r.kv_reserved_after, 0u);
}

INSTANTIATE_TEST_SUITE_P(Architectures, ServingBatch,
                         ::testing::Values("LlamaForCausalLM", "Qwen3MoeForCausalLM"));

}  // namespace
}  // namespace fp4lm::engine::serving_batch_test
