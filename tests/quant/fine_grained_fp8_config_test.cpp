// Block-wise FP8 configs (quant_method "fp8", docs/FORMAT.md §10) in the shapes published by
// DeepSeek-V3, Qwen3-*-FP8 and MiniMax-M2; exclusions by whole name components; the tensors decide
// what is quantized when they are consulted.
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "quant/fine_grained_fp8_config.h"

namespace fp4lm::quant::fine_grained_fp8_config_test {
namespace {

using nlohmann::json;

TEST(FineGrainedFp8Config, PublishedShapesParse) {
  const json deepseek = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                         {"weight_block_size", {128, 128}}};
  const json minimax = {{"activation_scheme", "dynamic"}, {"fmt", "float8_e4m3fn"}, {"quant_method", "fp8"},
                        {"weight_block_size", {128, 128}},
                        {"modules_to_not_convert", {"gate", "e_score_correction_bias", "lm_head"}}};
  const json deepseek31 = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                           {"scale_fmt", "ue8m0"}, {"weight_block_size", {128, 128}}};
  for (const json& qc : {deepseek, minimax, deepseek31}) {
    auto c = parse_quant_config(std::nullopt, {{"quantization_config", qc}}, "/m");
    EXPECT_EQ(c->family(), Family::fine_grained_fp8);
    EXPECT_EQ(family_name(c->family()), "fp8");
    EXPECT_TRUE(c->quantized());
    EXPECT_EQ(c->weight_block("model.layers.0.mlp.down_proj"), (std::pair<int64_t, int64_t>{128, 128}));
    EXPECT_NE(c->describe().find("weight_block_size=[128, 128]"), std::string::npos) << c->describe();
    EXPECT_FALSE(c->exclusions_decide());
  }
  const FineGrainedFp8Config m = parse_fine_grained_fp8_config(minimax, "/m");
  EXPECT_TRUE(m.excluded("model.layers.3.block_sparse_moe.gate"));
  EXPECT_FALSE(m.excluded("model.layers.3.block_sparse_moe.experts.0.gate_proj"));  // not a substring match
  EXPECT_TRUE(m.excluded("lm_head"));
  // No tensors consulted: the lists decide; tensors consulted: a float weight is unquantized.
  EXPECT_EQ(m.module_scheme("model.layers.0.self_attn.q_proj", {}), Scheme::fp8_block);
  EXPECT_EQ(m.module_scheme("model.layers.0.block_sparse_moe.gate", {}), Scheme::unquantized);
  ModuleTensors t;
  t.dtype = [](const std::string&) { return std::optional<DType>(DType::BF16); };
  t.scheme = [](const std::string& mod) {
    return mod.ends_with("q_proj") ? Scheme::fp8_block : Scheme::unquantized;
  };
  EXPECT_EQ(m.module_scheme("model.layers.0.self_attn.q_proj", t), Scheme::fp8_block);
  EXPECT_EQ(m.module_scheme("model.layers.0.self_attn.o_proj", t), Scheme::unquantized);
}

TEST(FineGrainedFp8Config, MalformedConfigsAreErrorsNamingTheKey) {
  auto err = [](const json& qc) { return test::error_of([&] { parse_fine_grained_fp8_config(qc, "/m/config.json"); }); };
  EXPECT_NE(err({{"quant_method", "fp8"}}).find("/m/config.json: quant_method fp8 without weight_block_size"),
            std::string::npos);
  EXPECT_NE(err({{"quant_method", "fp8"}, {"weight_block_size", {0, 128}}}).find("two positive integers"),
            std::string::npos);
  EXPECT_NE(err({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"activation_scheme", "static"}})
                .find("static activation scales are not supported"),
            std::string::npos);
  EXPECT_NE(err({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"fmt", "e5m2"}}).find("fmt 'e5m2'"),
            std::string::npos);
  EXPECT_NE(err({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}, {"modules_to_not_convert", "lm_head"}})
                .find("modules_to_not_convert must be a list"),
            std::string::npos);
}

}  // namespace
}  // namespace fp4lm::quant::fine_grained_fp8_config_test
