// quant::summarize_exclusions: exclude_modules in the form nvidia-modelopt 0.47 writes (its prefix
// wildcard summary of the unquantized modules), checked on the cases its exports show: a Gemma 4
// router, a vision tower, the hybrids' leaf modules that must stay exact, a fully excluded block.
#include <gtest/gtest.h>

#include "quant/export_format.h"

namespace fp4lm::quant::exclusion_summary_test {
namespace {

using Names = std::vector<std::string>;

TEST(ExclusionSummary, LeavesWithQuantizedSiblingsStayExact) {
  const Names quantized = {"model.layers.0.self_attn.q_proj", "model.layers.0.mlp.experts.0.gate_proj",
                           "model.layers.0.linear_attn.in_proj_qkvz", "model.layers.0.mlp.down_proj"};
  EXPECT_EQ(summarize_exclusions({"model.embed_tokens", "model.layers.0.mlp.gate", "model.layers.0.linear_attn.conv1d",
                                  "lm_head"},
                                 quantized),
            (Names{"model.embed_tokens", "model.layers.0.mlp.gate", "model.layers.0.linear_attn.conv1d", "lm_head"}));
}

TEST(ExclusionSummary, AModuleWithNoQuantizedNeighbourBecomesItsShortestFreePrefix) {
  const Names quantized = {"model.layers.0.self_attn.q_proj", "model.layers.0.mlp.gate_proj",
                           "model.layers.1.self_attn.q_proj", "model.layers.1.mlp.gate_proj"};
  // Gemma 4's router: nothing else under model.layers.<i>.router.
  EXPECT_EQ(summarize_exclusions({"model.layers.0.router.proj", "model.layers.1.router.proj"}, quantized),
            (Names{"model.layers.0.router*", "model.layers.1.router*"}));
  // A whole attention block left unquantized (the published Gemma-4-31B's form), and a vision
  // tower's modules, each listed once.
  EXPECT_EQ(summarize_exclusions({"model.layers.0.self_attn.o_proj", "model.vision_tower.encoder.layers.0.fc1",
                                  "model.vision_tower.patch_embedding", "model.embed_vision.embedding_projection"},
                                 {"model.layers.0.mlp.gate_proj"}),
            (Names{"model.layers.0.self_attn*", "model.vision_tower*", "model.embed_vision*"}));
}

TEST(ExclusionSummary, APrefixSharedWithAQuantizedNameIsClosedByItsDot) {
  // "model.layers.1*" would also match layer 10, which is quantized: "model.layers.1.*".
  EXPECT_EQ(summarize_exclusions({"model.layers.1.mlp.down_proj"}, {"model.layers.10.mlp.down_proj"}),
            (Names{"model.layers.1.*"}));
}

TEST(ExclusionSummary, PatternsStayDuplicatesGoAndNothingQuantizedIsOneWildcard) {
  EXPECT_EQ(summarize_exclusions({"mtp*", "model.visual*", "model.visual.blocks.0.attn.qkv", "mtp.fc"},
                                 {"model.language_model.layers.0.mlp.gate_proj"}),
            (Names{"mtp*", "model.visual*"}));
  EXPECT_EQ(summarize_exclusions({"model.layers.0.mlp.down_proj", "model.embed_tokens"}, {}), (Names{"model*"}));
  EXPECT_TRUE(summarize_exclusions({}, {"a.b"}).empty());
}

}  // namespace
}  // namespace fp4lm::quant::exclusion_summary_test
