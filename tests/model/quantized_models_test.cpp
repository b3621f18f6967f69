// Whole-model logits across quantization schemes and kernel backends, on checkpoints written by
// the library (synth/synthetic_checkpoint.h): the same random weights unquantized, as
// W4A16_NVFP4 and as NVFP4 (W4A4), for every architecture.
#include <gtest/gtest.h>

#include <cmath>

#include "common/paths.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "synth/synthetic_checkpoint.h"
#include "common/error_norms.h"

namespace fp4lm::model::quantized_models_test {
namespace {

using quant::QuantAlgo;
using test::TempDir;

const std::vector<int32_t> kTokens = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77};

std::vector<float> logits_of(const std::string& dir, EngineOptions o) { return checkpoint_logits(dir, kTokens, o); }

EngineOptions opts(const std::string& dtype, const std::string& linear = "", const std::string& moe = "") {
  EngineOptions o;
  o.dtype = dtype;
  o.linear_backend = linear;
  o.moe_backend = moe;
  return o;
}

class QuantizedModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string write(QuantAlgo algo) {
    synth::SyntheticOptions s;
    s.architecture = GetParam();
    s.algo = algo;
    s.quantize_lm_head = true;
    s.seed = 5;
    std::string d = (dir_ / std::string(quant::algo_name(algo))).string();
    synth::write_synthetic_checkpoint(d, s);
    return d;
  }
  TempDir dir_;
};

TEST_P(QuantizedModelTest, W4A16AndW4A4StayCloseToUnquantized) {
  const auto plain = logits_of(write(QuantAlgo::None), opts("float32"));
  const auto w4a16 = logits_of(write(QuantAlgo::W4A16_NVFP4), opts("float32"));
  const auto w4a4 = logits_of(write(QuantAlgo::NVFP4), opts("float32"));
  const double e16 = test::rel_rms(w4a16, plain), e4 = test::rel_rms(w4a4, plain), e4_16 = test::rel_rms(w4a4, w4a16);
  RecordProperty("w4a16_vs_plain", std::to_string(e16));
  RecordProperty("w4a4_vs_plain", std::to_string(e4));
  // 4-bit weights (and for W4A4 4-bit activations) perturb the logits by a bounded amount:
  // NVFP4 weight error is ~10% RMS per matrix; activations add about as much again.
  // The hybrids' gated delta-nets (L2-normalized q/k, exponential gates over the recurrent
  // state) amplify that noise in these random models: dense Qwen3.5 measured 0.34 / 0.43 (its
  // exactness against the dequantized weights is tested in qwen3_5_test.cpp).
  const double wider = std::string(GetParam()).starts_with("Qwen3_5") ? 1.3 : 1.0;
  EXPECT_GT(e16, 0.005) << GetParam();
  EXPECT_LT(e16, 0.3 * wider) << GetParam();
  EXPECT_GT(e4_16, 0.005) << GetParam();
  EXPECT_LT(e4, 0.4 * wider) << GetParam();
  EXPECT_LT(e16, e4) << GetParam();  // quantizing activations too only adds error
}

TEST_P(QuantizedModelTest, FastBackendsMatchTheReferenceBackend) {
  for (QuantAlgo algo : {QuantAlgo::W4A16_NVFP4, QuantAlgo::NVFP4}) {
    const std::string d = write(algo);
    const auto fast = logits_of(d, opts("float32"));
    const auto ref = logits_of(d, opts("float32", "reference", "reference"));
    EXPECT_LT(test::rel_rms(fast, ref), 1e-4) << GetParam() << " " << quant::algo_name(algo);
    const auto fast16 = logits_of(d, opts("bfloat16"));
    const auto ref16 = logits_of(d, opts("bfloat16", "reference", "reference"));
    EXPECT_LT(test::rel_rms(fast16, ref16), 2e-2) << GetParam() << " bf16 " << quant::algo_name(algo);
  }
}

TEST_P(QuantizedModelTest, ActivationOverrideRunsNvfp4AsTheW4A16Checkpoint) {
  // The same codes and scales: an NVFP4 checkpoint under --override-activation-dtype bfloat16
  // computes exactly what the W4A16_NVFP4 checkpoint computes at bfloat16.
  EngineOptions o = opts("bfloat16");
  const auto w4a16 = logits_of(write(QuantAlgo::W4A16_NVFP4), o);
  o.override_activation_dtype = DType::BF16;
  const auto overridden = logits_of(write(QuantAlgo::NVFP4), o);
  ASSERT_EQ(w4a16.size(), overridden.size());
  for (size_t i = 0; i < w4a16.size(); ++i) ASSERT_EQ(w4a16[i], overridden[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, QuantizedModelTest,
                         ::testing::Values("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                           "Qwen3MoeForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM",
                                           "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace fp4lm::model::quantized_models_test
