// config.json as transformers 5 `save_pretrained` writes it (found by
// scripts/validate_transformers.py): RoPE in one `rope_parameters` object instead of top-level
// rope_theta + rope_scaling, and Qwen3-MoE's expert count as `num_local_experts`. Before, fp4lm
// ran such checkpoints with rope_theta 10000 and no scaling (silently wrong logits) and refused
// the Qwen3-MoE one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error_of.h"
#include "model/model_config.h"

namespace fp4lm::model::transformers5_config_test {
namespace {

using nlohmann::json;

json base(const char* arch) {
  return {{"architectures", {arch}}, {"vocab_size", 256},          {"hidden_size", 64},
          {"intermediate_size", 96}, {"num_hidden_layers", 2},     {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"max_position_embeddings", 512}, {"dtype", "bfloat16"}};
}

TEST(Transformers5Config, RopeParametersCarryThetaAndLlama3Scaling) {
  json j = base("LlamaForCausalLM");
  j["rope_parameters"] = {{"rope_type", "llama3"},     {"rope_theta", 500000.0},
                          {"factor", 8.0},             {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},   {"original_max_position_embeddings", 64}};
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(c.torch_dtype, "bfloat16");  // `dtype`, not `torch_dtype`
}

TEST(Transformers5Config, RopeParametersLinearAndDefault) {
  json j = base("Qwen2ForCausalLM");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"rope_theta", 1e6}, {"factor", 2.0}};
  ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 2.0);

  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, "");
  // Without rope_theta inside, the top-level one (or the default 10000) stays.
  j["rope_parameters"] = {{"rope_type", "default"}};
  j["rope_theta"] = 20000.0;
  EXPECT_EQ(parse_model_config(j, "config.json").rope_theta, 20000.0);
}

TEST(Transformers5Config, OlderTopLevelFormStillReads) {
  json j = base("LlamaForCausalLM");
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
}

TEST(Transformers5Config, BadRopeParametersAreNamed) {
  json j = base("LlamaForCausalLM");
  j["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 1e6}, {"factor", 4.0}};
  EXPECT_EQ(test::error_of([&] { parse_model_config(j, "config.json"); }),
            "config.json: unsupported rope_parameters type 'dynamic' (supported: default, linear, llama3, yarn, longrope)");
  j["rope_parameters"] = "fast";
  EXPECT_EQ(test::error_of([&] { parse_model_config(j, "config.json"); }),
            "config.json: field 'rope_parameters' must be an object or null");
}

TEST(Transformers5Config, Qwen3MoeNumLocalExperts) {
  json j = base("Qwen3MoeForCausalLM");
  j.update({{"num_local_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32}, {"head_dim", 16}});
  EXPECT_EQ(parse_model_config(j, "config.json").moe.num_experts, 8);
  j["num_experts"] = 6;  // both present: num_experts (the older name published configs carry) wins
  EXPECT_EQ(parse_model_config(j, "config.json").moe.num_experts, 6);
  j.erase("num_experts");
  j.erase("num_local_experts");
  EXPECT_EQ(test::error_of([&] { parse_model_config(j, "config.json"); }),
            "config.json: missing required field 'num_experts'");
}

}  // namespace
}  // namespace fp4lm::model::transformers5_config_test
