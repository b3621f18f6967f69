// Replicas of the NVIDIA layouts of the DeepSeek-style families (issue 23), which differ by
// ModelOpt version: DeepSeek-R1 v1 (every self_attn* and every mlp.gate excluded), R1-0528
// (lm_head + self_attn* excluded), newer exports (the four MLA projections and lm_head excluded,
// o_proj NVFP4), GLM-4.7 (attention BF16) and MiniMax-M2.x (experts only). Each loads with the
// scheme the layout says per layer and the oracle's lines, and generates, as stored (W4A4) and
// under --override-activation-dtype bfloat16 (W4A16), staying close to each other.
#include <gtest/gtest.h>

#include <cmath>

#include "common/log_capture.h"
#include "common/paths.h"
#include "model/causal_lm.h"
#include "model/load/model_loader.h"
#include "reference/logits_check.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::deepseek_published_test {
namespace {

using quant::QuantAlgo;

struct Layout {
  const char* name;
  const char* arch;
  std::vector<std::string> exclude;
  // Whether engine layer `name` (not lm_head, not a router) is stored NVFP4 in this layout.
  bool (*quantized)(const std::string& name);
};

bool contains(const std::string& s, const char* t) { return s.find(t) != std::string::npos; }

const Layout kLayouts[] = {
    {"DeepSeek-R1 v1", "DeepseekV3ForCausalLM", {"model.layers.*.self_attn*", "model.layers.*.mlp.gate"},
     [](const std::string& n) { return !contains(n, "self_attn"); }},
    {"DeepSeek-R1-0528", "DeepseekV3ForCausalLM", {"model.layers.*.self_attn*"},
     [](const std::string& n) { return !contains(n, "self_attn"); }},
    {"DeepSeek newer export", "DeepseekV3ForCausalLM",
     {"*q_a_proj*", "*q_b_proj*", "*kv_a_proj_with_mqa*", "*kv_b_proj*"},
     [](const std::string& n) {
       return !contains(n, "q_a_proj") && !contains(n, "q_b_proj") && !contains(n, "kv_a_proj") &&
              !contains(n, "kv_b_proj");
     }},
    {"GLM-4.7", "Glm4MoeForCausalLM", {"model.layers.*.self_attn*"},
     [](const std::string& n) { return !contains(n, "self_attn"); }},
    {"MiniMax-M2.x", "MiniMaxM2ForCausalLM", {"model.layers.*.self_attn*"},
     [](const std::string& n) { return contains(n, "experts"); }},
};

const std::vector<int32_t> kTokens = {1, 17, 5, 96, 40, 40, 3, 62, 11};

TEST(DeepseekPublished, LayoutsLoadWithTheirSchemesAndGenerateWithAndWithoutTheOverride) {
  for (const Layout& lay : kLayouts) {
    SCOPED_TRACE(lay.name);
    test::TempDir dir;
    synth::SyntheticOptions s;
    s.architecture = lay.arch;
    s.algo = QuantAlgo::NVFP4;
    s.exclude = lay.exclude;
    s.seed = 5;
    synth::write_synthetic_checkpoint(dir.path().string(), s);

    EngineOptions plain;
    plain.dtype = "bfloat16";
    {
      ModelLoader l(io::Checkpoint::open(dir.path().string()), plain);
      for (const LayerSpec& spec : l.layers()) {
        if (spec.router || spec.name == "lm_head") {
          EXPECT_EQ(l.describe(spec).scheme.key, kernels::kUnquantized) << spec.name;
          continue;
        }
        EXPECT_EQ(l.describe(spec).scheme.key, lay.quantized(spec.name) ? kernels::kNvfp4W4A4 : kernels::kUnquantized)
            << spec.name;
      }
    }
    std::string log;
    std::unique_ptr<CausalLM> lm;
    {
      test::LogCapture cap(spdlog::level::info);
      lm = CausalLM::load(dir.path().string(), plain);
      log = cap.text();
    }
    EXPECT_TRUE(contains(log, "Detected ModelOpt NVFP4 checkpoint")) << log;
    EXPECT_TRUE(contains(log, "NVFP4 MoE backend out of potential backends")) << log;
    EXPECT_TRUE(contains(log, "unquantized Linear backend")) << log;
    const std::vector<float> w4a4 = all_logits(*lm, kTokens);

    EngineOptions over = plain;
    over.override_activation_dtype = DType::BF16;
    {
      test::LogCapture cap(spdlog::level::info);
      lm = CausalLM::load(dir.path().string(), over);
      log = cap.text();
    }
    EXPECT_TRUE(contains(log, "NVFP4 W4A16 override active (override_activation_dtype=bfloat16)")) << log;
    const std::vector<float> w4a16 = all_logits(*lm, kTokens);
    // Generation: a few greedy tokens either way, all logits finite; the two runs differ only by
    // the experts' activation quantization.
    for (float v : w4a4) ASSERT_TRUE(std::isfinite(v));
    double num = 0, den = 0;
    for (size_t i = 0; i < w4a4.size(); ++i) {
      num += (w4a4[i] - w4a16[i]) * (w4a4[i] - w4a16[i]);
      den += w4a16[i] * w4a16[i];
    }
    EXPECT_LT(std::sqrt(num / den), 0.5);  // measured 0.04 - 0.31 (tiny random models)
    EXPECT_GT(std::sqrt(num / den), 0.0);  // W4A4 really quantized the activations
  }
}

}  // namespace
}  // namespace fp4lm::model::deepseek_published_test
