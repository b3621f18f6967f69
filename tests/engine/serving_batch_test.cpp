// The scheduler on a real (tiny random) model through CausalLmStepModel: one batched forward
// per step, and every request's greedy tokens equal engine::generate's for it alone, whatever
// else is in the batch and however its prompt is chunked.
#include <gtest/gtest.h>

#include "../model/tiny_models.h"
#include "common/paths.h"
#include "engine/causal_lm_step_model.h"
#include "engine/generator.h"
#include "engine/scheduler.h"

namespace fp4lm::engine {
namespace {

class ServingBatch : public ::testing::TestWithParam<std::string> {};

TEST_P(ServingBatch, GreedyTokensEqualGenerateAloneWhateverTheBatch) {
  fp4lm::test::TempDir dir;
  test::write_tiny_model(test::make_tiny_model(GetParam()), dir.path());
  model::EngineOptions o;
  o.dtype = "float32";
  model::LoadOptions lo;
  lo.max_model_len = 48;
  auto lm = model::CausalLM::load(dir.path().string(), o, lo);

  std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {3}, {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 2, 4}, {11, 12}, {6, 1, 8, 3, 5}};
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) {
    RequestParams gp;
    gp.prompt = p;
    gp.max_tokens = 10;
    gp.ignore_eos = true;
    alone.push_back(generate(*lm, nullptr, gp).output_ids);
  }
  CausalLmStepModel sm(*lm);
  SchedulerConfig cfg;
  cfg.max_num_seqs = 4;
  cfg.max_num_batched_tokens = 6;  // prompts are split across steps and mixed with decodes
  Scheduler s(sm, nullptr, cfg);
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestParams p;
    p.prompt = prompts[i];
    p.max_tokens = 10;
    p.ignore_eos = true;
    s.add(static_cast<int64_t>(i), p);
  }
  std::map<int64_t, std::vector<int32_t>> got;
  size_t widest = 0;
  for (int step = 0; step < 200 && s.has_work(); ++step) {
    for (auto& [id, out] : s.step()) got[id].insert(got[id].end(), out.token_ids.begin(), out.token_ids.end());
    widest = std::max(widest, s.last_batch().size());
  }
  ASSERT_FALSE(s.has_work());
  EXPECT_GE(widest, 3u) << "several sequences shared a forward";
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[static_cast<int64_t>(i)], alone[i]) << "request " << i;
  EXPECT_EQ(s.kv_reserved_bytes(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Architectures, ServingBatch,
                         ::testing::Values("LlamaForCausalLM", "Qwen3MoeForCausalLM"));

}  // namespace
}  // namespace fp4lm::engine
