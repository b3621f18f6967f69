// The synthetic writer's benchmark mode and its config overrides: random codes write the same
// tensors (names, dtypes, shapes) as the reference quantizer for the same options, every one
// the architecture's plan asks for, and the model they make loads and runs; config_overrides
// reach config.json and, through the plan, the tensors' shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "common/paths.h"
#include "io/checkpoint.h"
#include "model/causal_lm.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::synth::synthetic_checkpoint_test {
namespace {

using quant::QuantAlgo;
using test::TempDir;

// "name dtype shape" of every stored tensor, sorted.
std::vector<std::string> layout_of(const std::string& dir) {
  const auto ckpt = io::Checkpoint::open(dir);
  std::vector<std::string> out;
  for (const std::string& n : ckpt->tensor_names()) {
    const TensorView& t = ckpt->get(n);
    out.push_back(n + " " + std::string(dtype_name(t.dtype)) + " " + shape_str(t.shape));
  }
  return out;
}

// Loads `dir` and decodes two tokens after a 3-token prompt: every logit finite.
void expect_runs(const std::string& dir) {
  auto lm = model::CausalLM::load(dir, model::EngineOptions{});
  model::SequenceState s = lm->new_sequence();
  std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
  const std::vector<int32_t> prompt = {3, 4, 5};
  lm->forward(s, prompt.data(), 3, model::LogitsMode::last, logits.data());
  int32_t tok = 6;
  lm->forward(s, &tok, 1, model::LogitsMode::last, logits.data());
  for (size_t i = 0; i < logits.size(); ++i) ASSERT_TRUE(std::isfinite(logits[i])) << dir << " logit " << i;
}

struct Case {
  const char* arch;
  QuantAlgo algo;
};

class RandomCodes : public ::testing::TestWithParam<Case> {};

TEST_P(RandomCodes, WriteTheQuantizersLayoutAndRun) {
  TempDir dir;
  SyntheticOptions o;
  o.architecture = GetParam().arch;
  o.algo = GetParam().algo;
  o.quantize_lm_head = true;
  if (o.algo == QuantAlgo::MIXED_PRECISION) {  // as NVIDIA's hybrid exports: FP8 attention, W4A16 experts
    o.mixed["model.layers.1.self_attn.q_proj"] = o.mixed["model.layers.1.self_attn.k_proj"] = QuantAlgo::FP8;
    o.mixed["model.layers.1.self_attn.v_proj"] = o.mixed["model.layers.1.self_attn.o_proj"] = QuantAlgo::FP8;
    o.mixed["model.layers.0.mlp.experts"] = o.mixed["model.layers.1.mlp.experts"] = QuantAlgo::W4A16_NVFP4;
    o.mixed["lm_head"] = QuantAlgo::W4A16_NVFP4;
  }
  const std::string ref = (dir / "ref").string(), fast = (dir / "fast").string();
  write_synthetic_checkpoint(ref, o);
  o.random_codes = true;
  write_synthetic_checkpoint(fast, o);
  const std::vector<std::string> want = layout_of(ref), got = layout_of(fast);
  ASSERT_GT(want.size(), 10u);
  EXPECT_EQ(got, want);
  EXPECT_EQ(io::Checkpoint::open(fast)->config(), io::Checkpoint::open(ref)->config());
  expect_runs(fast);
}

INSTANTIATE_TEST_SUITE_P(Archs, RandomCodes,
                         ::testing::Values(Case{"Qwen3MoeForCausalLM", QuantAlgo::NVFP4},
                                           Case{"LlamaForCausalLM", QuantAlgo::FP8},
                                           Case{"LlamaForCausalLM", QuantAlgo::W4A16_NVFP4},
                                           Case{"Qwen3_5MoeForCausalLM", QuantAlgo::MIXED_PRECISION},
                                           Case{"NemotronHForCausalLM", QuantAlgo::NVFP4},
                                           Case{"DeepseekV3ForCausalLM", QuantAlgo::None}),
                         [](const auto& info) {
                           return std::string(info.param.arch).substr(0, 8) +
                                  std::string(quant::algo_name(info.param.algo)).substr(0, 5) +
                                  std::to_string(info.index);
                         });

TEST(RandomCodes, RefuseWhatTheyDoNotWrite) {
  TempDir dir;
  SyntheticOptions o;
  o.architecture = "LlamaForCausalLM";
  o.algo = QuantAlgo::W8A16;
  o.random_codes = true;
  const std::string e = test::error_of([&] { write_synthetic_checkpoint((dir / "c").string(), o); });
  EXPECT_NE(e.find("random_codes writes NVFP4, NVFP4_AWQ, W4A16_NVFP4, FP8 or unquantized Linears, not W8A16"),
            std::string::npos)
      << e;
}

TEST(ConfigOverrides, ReachConfigJsonAndThePlan) {
  TempDir dir;
  SyntheticOptions o;
  o.architecture = "LlamaForCausalLM";
  o.algo = QuantAlgo::NVFP4;
  o.config_overrides = {{"intermediate_size", 160}, {"rope_theta", 500000.0}};
  write_synthetic_checkpoint(dir.path().string(), o);
  const auto ckpt = io::Checkpoint::open(dir.path().string());
  EXPECT_EQ(ckpt->config().at("intermediate_size"), 160);
  EXPECT_EQ(ckpt->config().at("rope_theta"), 500000.0);
  EXPECT_EQ(ckpt->get("model.layers.1.mlp.gate_proj.weight").shape, (Shape{160, o.hidden / 2}));
  EXPECT_EQ(ckpt->get("model.layers.1.mlp.down_proj.weight").shape, (Shape{o.hidden, 160 / 2}));
}

}  // namespace
}  // namespace fp4lm::synth::synthetic_checkpoint_test
