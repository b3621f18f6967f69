// --activation-scale dynamic on whole checkpoints: NVFP4 W4A4 files without input_scale (ModelOpt
// and compressed-tensors names, dense and MoE) load only when asked and then run W4A4 with
// per-token scales; the file's scales are never read; logits are batch-, chunk- and
// step-invariant; static stays the default; the activation override still wins.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/checkpoint_edit.h"
#include "common/compressed_tensors_writer.h"
#include "common/error_of.h"
#include "common/paths.h"
#include "reference/logits_check.h"
#include "model/causal_lm.h"
#include "model/load/model_loader.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::dynamic_activation_scale_test {
namespace {

using quant::QuantAlgo;
using test::TempDir;

const std::vector<int32_t> kTokens = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77};

EngineOptions scale(bool dynamic) {
  EngineOptions o;
  o.dtype = "float32";
  o.dynamic_activation_scale = dynamic;
  return o;
}

bool is_activation_scale(const std::string& name) {
  return name.find("input_scale") != std::string::npos || name.find("input_global_scale") != std::string::npos;
}

class DynamicActivationScale : public ::testing::TestWithParam<const char*> {};

TEST_P(DynamicActivationScale, RunsW4A4WithoutInputScaleOnlyWhenAsked) {
  TempDir dir;
  const std::string full = (dir.path() / "full").string(), bare = (dir.path() / "bare").string();
  synth::SyntheticOptions s;
  s.architecture = GetParam();
  s.algo = QuantAlgo::NVFP4;
  s.distinct_shard_scales = true;
  synth::write_synthetic_checkpoint(full, s);
  test::copy_dir(full, bare);
  test::edit_tensors(bare, [](test::EditedTensor& t) { return !is_activation_scale(t.name); });

  // Static (the default): an error naming the tensor and both ways out.
  const std::string e = test::error_of([&] { CausalLM::load(bare, scale(false)); });
  EXPECT_NE(e.find("input_scale"), std::string::npos) << e;
  EXPECT_NE(e.find("--activation-scale dynamic"), std::string::npos) << e;

  // Dynamic: W4A4 keys, per-token flag on the weights, the file's input_scale never read.
  ModelLoader l(io::Checkpoint::open(bare), scale(true));
  const LayerSpec& first = l.layers().front();
  const LayerReport r = l.describe(first);
  EXPECT_EQ(r.scheme.key, kernels::kNvfp4W4A4);
  EXPECT_TRUE(r.scheme.dynamic_activation_scale);
  EXPECT_TRUE(l.linear_weights(first, r.scheme).per_token_input_scale);
  const std::vector<float> bare_dyn = checkpoint_logits(bare, kTokens, scale(true));
  EXPECT_TRUE(bit_identical(bare_dyn, checkpoint_logits(full, kTokens, scale(true))));
  // It is really W4A4 with other scales than the static ones, and static is the default.
  const std::vector<float> full_static = checkpoint_logits(full, kTokens, scale(false));
  EXPECT_FALSE(bit_identical(bare_dyn, full_static));
  EngineOptions defaults;
  defaults.dtype = "float32";
  EXPECT_TRUE(bit_identical(full_static, checkpoint_logits(full, kTokens, defaults)));
  // The activation override wins: W4A16, identical whatever the activation scale.
  EngineOptions o16 = scale(true);
  o16.override_activation_dtype = DType::BF16;
  EngineOptions s16 = scale(false);
  s16.override_activation_dtype = DType::BF16;
  EXPECT_TRUE(bit_identical(checkpoint_logits(bare, kTokens, o16), checkpoint_logits(full, kTokens, s16)));
  ModelLoader lo(io::Checkpoint::open(bare), o16);
  EXPECT_FALSE(lo.describe(lo.layers().front()).scheme.dynamic_activation_scale);

  // Per-token scales: one forward = decode step by step (1e-5) = chunked prefill = batched with
  // other sequences, bit for bit.
  expect_steps_chunks_and_batches_match_one_forward(bare, scale(true), kTokens);
}

// The same weights in compressed-tensors' names without input_global_scale run bit-identically
// to the ModelOpt form under --activation-scale dynamic.
TEST_P(DynamicActivationScale, CompressedTensorsWithoutInputGlobalScaleEqualsModelopt) {
  TempDir dir;
  const std::string mo = (dir.path() / "modelopt").string(), ct = (dir.path() / "ct").string();
  synth::SyntheticOptions s;
  s.architecture = GetParam();
  s.algo = QuantAlgo::NVFP4;
  s.seed = 11;
  synth::write_synthetic_checkpoint(mo, s);
  test::write_compressed_tensors(
      mo, ct,
      {test::ct_config("nvfp4-pack-quantized", {{"group_0", test::ct_nvfp4_group({"Linear"}, true)}},
                       {"lm_head", "re:.*mlp\\.gate$"}),
       true});
  EXPECT_NE(test::error_of([&] { CausalLM::load(ct, scale(false)); }).find("input_global_scale"), std::string::npos);
  EXPECT_TRUE(bit_identical(checkpoint_logits(ct, kTokens, scale(true)), checkpoint_logits(mo, kTokens, scale(true))));
}

INSTANTIATE_TEST_SUITE_P(Archs, DynamicActivationScale,
                         ::testing::Values("LlamaForCausalLM", "Qwen3MoeForCausalLM"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param).substr(0, std::string(i.param).find("For"));
                         });

}  // namespace
}  // namespace fp4lm::model::dynamic_activation_scale_test
