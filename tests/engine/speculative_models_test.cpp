// Speculative decoding (n-gram) on real tiny models: a batch of greedy requests gives the same
// tokens and bit-identical logprobs with and without speculation (each verify position's logits
// equal a one-token decode's: batch invariance), with drafts verified, accepted and rejected
// along the way; a sliding-window ring rewinds; the recurrent states of the Qwen3.5 hybrid (gated
// delta-nets) and of Nemotron-H (Mamba-2) are cut back by replaying the accepted rows.
#include <gtest/gtest.h>

#include <cstring>

#include "reference/tiny_models.h"
#include "common/paths.h"
#include "engine/speculative_run.h"
#include "model/causal_lm.h"
#include "reference/hybrid_reference.h"
#include "reference/nemotron_h_reference.h"

namespace fp4lm::engine::speculative_models_test {
namespace {

struct SpecCase {
  std::string name, arch;
  int64_t window = 0, prefill_chunk = 256;
};

using spec_test::SpecOut;

SpecOut run(model::CausalLM& lm, bool speculate, const std::vector<std::vector<int32_t>>& prompts) {
  SchedulerConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 24;
  if (speculate) {
    c.speculative.method = "ngram";
    c.speculative.num_speculative_tokens = 3;
    c.speculative.prompt_lookup_max = 3;
  }
  return spec_test::run_requests(lm, c, prompts, 24);
}

class SpeculativeModels : public ::testing::TestWithParam<SpecCase> {};

TEST_P(SpeculativeModels, GreedyTokensAndLogprobsEqualThoseWithoutSpeculation) {
  const SpecCase& c = GetParam();
  fp4lm::test::TempDir dir;
  if (c.arch == "hybrid") {
    model::hybrid_ref::write_hybrid(model::hybrid_ref::make_hybrid(2), dir.path());
  } else if (c.arch == "nemotron_h") {
    fp4lm::test::write_tiny_model(fp4lm::test::nemotron::make_model(fp4lm::test::nemotron::Dims{}), dir.path());
  } else {
    fp4lm::test::TinyModel m = fp4lm::test::make_tiny_model(c.arch);
    if (c.window > 0) m.config["sliding_window"] = c.window;
    fp4lm::test::write_tiny_model(m, dir.path());
  }
  model::EngineOptions o;
  o.dtype = "float32";
  model::LoadOptions lo;
  lo.max_model_len = 64;
  lo.prefill_chunk = c.prefill_chunk;
  lo.progress = false;
  auto lm = model::CausalLM::load(dir.path().string(), o, lo);
  // Repetitive prompts, so the n-gram proposer has something to draft from.
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 6, 7, 8, 5, 6, 7, 8, 5, 6}, {11, 12, 11, 12, 11}, {3, 9, 27, 3, 9, 27, 3, 9}, {40, 41, 42, 43, 44, 40, 41}};
  const SpecOut plain = run(*lm, false, prompts);
  const SpecOut spec = run(*lm, true, prompts);
  spec_test::expect_same_greedy_run(spec, plain, c.name);
  EXPECT_GT(spec.drafts, 0);
  EXPECT_GT(spec.accepted, 0) << "greedy tiny models repeat themselves";
  if (c.arch == "hybrid" || c.arch == "nemotron_h") {
    // The recurrent tiny models repeat less: few drafts accepted, most rejected, so the replay
    // ran for cut-backs that keep one row and for some that keep more.
    EXPECT_LT(spec.accepted, spec.drafts) << "drafts rejected: the recurrent state was cut back";
  } else {
    EXPECT_LT(spec.steps, plain.steps);
  }
  std::printf("[ %s ] draft tokens %lld, accepted %lld; steps %d (plain %d)\n", c.name.c_str(),
              static_cast<long long>(spec.drafts), static_cast<long long>(spec.accepted), spec.steps, plain.steps);
}

INSTANTIATE_TEST_SUITE_P(Architectures, SpeculativeModels,
                         ::testing::Values(SpecCase{"Llama", "LlamaForCausalLM"},
                                           SpecCase{"Qwen3Moe", "Qwen3MoeForCausalLM"},
                                           SpecCase{"MistralSlidingRing", "MistralForCausalLM", 6, 4},
                                           SpecCase{"Qwen35MoeHybrid", "hybrid"},
                                           SpecCase{"NemotronH", "nemotron_h"}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fp4lm::engine::speculative_models_test
