// ModelOpt config parsing (both forms), algorithm names, exclusion matching, MIXED_PRECISION
// module resolution (issue 3).
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "core/error.h"
#include "quant/modelopt_config.h"

using namespace fp4lm;
using namespace fp4lm::quant;
using nlohmann::json;

namespace {

using fp4lm::test::error_of;

json legacy(json quantization) { return {{"producer", {{"name", "modelopt"}}}, {"quantization", quantization}}; }

json nvfp4_legacy() {
  return legacy({{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16},
                 {"exclude_modules", {"lm_head"}}});
}


}  // namespace

TEST(ModeloptConfig, LegacyHfQuantConfigParses) {
  QuantConfig q = parse_quant_config(nvfp4_legacy(), json::object(), "/ckpt");
  EXPECT_EQ(q.algo, QuantAlgo::NVFP4);
  EXPECT_EQ(q.group_size, 16);
  EXPECT_FALSE(q.kv_cache_quant_algo.has_value());
  EXPECT_EQ(q.exclude_modules, std::vector<std::string>{"lm_head"});
  EXPECT_EQ(q.source, "/ckpt/hf_quant_config.json");
}

TEST(ModeloptConfig, LowerCaseAlgoAccepted) {
  json j = nvfp4_legacy();
  j["quantization"]["quant_algo"] = "w4a16_nvfp4";
  EXPECT_EQ(parse_quant_config(j, json::object(), "/c").algo, QuantAlgo::W4A16_NVFP4);
  EXPECT_EQ(parse_algo("nvfp4", "x"), QuantAlgo::NVFP4);
  EXPECT_EQ(parse_algo("Mixed_Precision", "x"), QuantAlgo::MIXED_PRECISION);
  EXPECT_EQ(parse_algo("fp8", "x"), QuantAlgo::FP8);
}

TEST(ModeloptConfig, UnknownAlgoRejectedListingSupported) {
  json j = nvfp4_legacy();
  j["quantization"]["quant_algo"] = "INT4_AWQ";
  std::string e = error_of([&] { parse_quant_config(j, json::object(), "/c"); });
  EXPECT_NE(e.find("unknown quant_algo 'INT4_AWQ'"), std::string::npos) << e;
  EXPECT_NE(e.find("NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION"), std::string::npos) << e;
  EXPECT_NE(e.find("/c/hf_quant_config.json"), std::string::npos) << e;
}

TEST(ModeloptConfig, MissingLegacyKeysRejectedByName) {
  for (const char* key : {"quant_algo", "kv_cache_quant_algo", "group_size", "exclude_modules"}) {
    json j = nvfp4_legacy();
    j["quantization"].erase(key);
    std::string e = error_of([&] { parse_quant_config(j, json::object(), "/c"); });
    EXPECT_NE(e.find(std::string("missing the required key '") + key + "'"), std::string::npos) << e;
  }
  // Null values are fine (present but empty).
  json j = nvfp4_legacy();
  j["quantization"]["exclude_modules"] = nullptr;
  EXPECT_TRUE(parse_quant_config(j, json::object(), "/c").exclude_modules.empty());
}

TEST(ModeloptConfig, GroupSizeMustBe16ForNvfp4) {
  json j = nvfp4_legacy();
  j["quantization"]["group_size"] = 32;
  std::string e = error_of([&] { parse_quant_config(j, json::object(), "/c"); });
  EXPECT_NE(e.find("group_size must be 16 for NVFP4 (found 32)"), std::string::npos) << e;
}

TEST(ModeloptConfig, ConfigJsonQuantizationConfigParses) {
  json cfg = {{"quantization_config",
               {{"quant_method", "modelopt"},
                {"quant_algo", "NVFP4"},
                {"ignore", {"lm_head", "model.layers.0.mlp.gate"}},
                {"kv_cache_scheme", {{"num_bits", 8}, {"type", "float"}}},
                {"config_groups",
                 {{"group_0",
                   {{"weights", {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}}},
                    {"input_activations", {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}}},
                    {"targets", {"Linear"}}}}}}}}};
  QuantConfig q = parse_quant_config(std::nullopt, cfg, "/c");
  EXPECT_EQ(q.algo, QuantAlgo::NVFP4);
  EXPECT_EQ(q.group_size, 16);
  EXPECT_EQ(q.kv_cache_quant_algo, "FP8");
  EXPECT_EQ(q.exclude_modules.size(), 2u);
  // Without quant_algo the config groups decide: weights-only 4-bit float = W4A16_NVFP4.
  cfg["quantization_config"].erase("quant_algo");
  cfg["quantization_config"]["config_groups"]["group_0"].erase("input_activations");
  EXPECT_EQ(parse_quant_config(std::nullopt, cfg, "/c").algo, QuantAlgo::W4A16_NVFP4);
}

TEST(ModeloptConfig, OtherQuantMethodRejected) {
  json cfg = {{"quantization_config", {{"quant_method", "awq"}, {"bits", 4}}}};
  std::string e = error_of([&] { parse_quant_config(std::nullopt, cfg, "/c"); });
  EXPECT_NE(e.find("unsupported quant_method 'awq'"), std::string::npos) << e;
}

TEST(ModeloptConfig, BothFormsMustAgree) {
  json cfg = {{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "W4A16_NVFP4"}, {"ignore", {"lm_head"}}}}};
  std::string e = error_of([&] { parse_quant_config(nvfp4_legacy(), cfg, "/c"); });
  EXPECT_NE(e.find("hf_quant_config.json says quant_algo NVFP4 but config.json"), std::string::npos) << e;
  cfg["quantization_config"]["quant_algo"] = "nvfp4";
  EXPECT_EQ(parse_quant_config(nvfp4_legacy(), cfg, "/c").algo, QuantAlgo::NVFP4);
  cfg["quantization_config"]["ignore"] = {"lm_head", "model.layers.0"};
  e = error_of([&] { parse_quant_config(nvfp4_legacy(), cfg, "/c"); });
  EXPECT_NE(e.find("exclude_modules"), std::string::npos) << e;
}

TEST(ModeloptConfig, NoConfigMeansUnquantized) {
  QuantConfig q = parse_quant_config(std::nullopt, json::object(), "/c");
  EXPECT_FALSE(q.quantized());
  EXPECT_EQ(module_algo(q, "model.layers.0.self_attn.q_proj"), QuantAlgo::None);
}

TEST(Exclusion, ExactMatch) {
  EXPECT_TRUE(pattern_excludes("lm_head", "lm_head"));
  EXPECT_FALSE(pattern_excludes("lm_head", "lm_head2"));
}

TEST(Exclusion, PrefixOnlyAtDotBoundary) {
  EXPECT_TRUE(pattern_excludes("model.layers.1", "model.layers.1.mlp"));
  EXPECT_TRUE(pattern_excludes("model.layers.1", "model.layers.1.mlp.down_proj"));
  EXPECT_FALSE(pattern_excludes("model.layers.1", "model.layers.10.mlp"));  // vLLM's substring rule says yes
  EXPECT_FALSE(pattern_excludes("model.layers.1", "model.layers.11"));
  EXPECT_FALSE(pattern_excludes("model.layers.0.mlp.gate", "model.layers.0.mlp.gate_proj"));
}

TEST(Exclusion, GlobStarMatchesDots) {
  EXPECT_TRUE(pattern_excludes("*mlp.gate", "model.layers.7.mlp.gate"));
  EXPECT_TRUE(pattern_excludes("model.layers.*.self_attn*", "model.layers.3.self_attn.q_proj"));
  EXPECT_TRUE(pattern_excludes("model.layers.?.mlp", "model.layers.3.mlp.up_proj"));  // glob + dot boundary
  EXPECT_FALSE(pattern_excludes("model.layers.?.mlp", "model.layers.13.mlp.up_proj"));
  EXPECT_FALSE(pattern_excludes("*mlp.gate", "model.layers.7.mlp.gate_proj"));
  EXPECT_TRUE(is_excluded({"foo", "*.k_proj"}, "model.layers.0.self_attn.k_proj"));
  EXPECT_FALSE(is_excluded({}, "anything"));
}

TEST(MixedPrecision, ResolutionExactContainerAndUnlisted) {
  json j = legacy({{"quant_algo", "MIXED_PRECISION"},
                   {"kv_cache_quant_algo", nullptr},
                   {"group_size", nullptr},
                   {"exclude_modules", {"lm_head"}},
                   {"quantized_layers",
                    {{"model.layers.0.self_attn.q_proj", {{"quant_algo", "NVFP4"}, {"group_size", 16}}},
                     {"model.layers.0.mlp.experts", {{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}}},
                     {"model.layers.1.self_attn.o_proj", {{"quant_algo", "FP8"}}}}}});
  QuantConfig q = parse_quant_config(j, json::object(), "/c");
  EXPECT_EQ(q.algo, QuantAlgo::MIXED_PRECISION);
  EXPECT_EQ(module_algo(q, "model.layers.0.self_attn.q_proj"), QuantAlgo::NVFP4);
  EXPECT_EQ(module_algo(q, "model.layers.0.self_attn.k_proj"), QuantAlgo::None);  // unlisted sibling
  EXPECT_EQ(module_algo(q, "model.layers.0.mlp.experts.5.down_proj"), QuantAlgo::W4A16_NVFP4);
  EXPECT_EQ(module_algo(q, "model.layers.1.self_attn.o_proj"), QuantAlgo::FP8);
  EXPECT_EQ(module_algo(q, "model.layers.0.mlp.experts_extra"), QuantAlgo::None);
}

TEST(MixedPrecision, NestedOrBadEntriesRejected) {
  json j = legacy({{"quant_algo", "MIXED_PRECISION"}, {"kv_cache_quant_algo", nullptr}, {"group_size", nullptr},
                   {"exclude_modules", nullptr},
                   {"quantized_layers", {{"a", {{"quant_algo", "NVFP4"}, {"group_size", 8}}}}}});
  EXPECT_NE(error_of([&] { parse_quant_config(j, json::object(), "/c"); }).find("group_size must be 16"),
            std::string::npos);
  j["quantization"]["quantized_layers"] = {{"a", {{"quant_algo", "BOGUS"}}}};
  EXPECT_NE(error_of([&] { parse_quant_config(j, json::object(), "/c"); }).find("unknown quant_algo 'BOGUS'"),
            std::string::npos);
  j["quantization"].erase("quantized_layers");
  EXPECT_NE(error_of([&] { parse_quant_config(j, json::object(), "/c"); }).find("quantized_layers"),
            std::string::npos);
}

TEST(ModeloptConfig, UnknownKvCacheAlgoRejected) {
  for (const char* ok : {"FP8", "fp8", "NVFP4", "NVFP4_AFFINE", "INT8"}) {
    json j = nvfp4_legacy();
    j["quantization"]["kv_cache_quant_algo"] = ok;
    EXPECT_EQ(parse_quant_config(j, json::object(), "/c").kv_cache_quant_algo, ok);
  }
  json j = nvfp4_legacy();
  j["quantization"]["kv_cache_quant_algo"] = "FP9";
  std::string e = error_of([&] { parse_quant_config(j, json::object(), "/c"); });
  EXPECT_NE(e.find("/c/hf_quant_config.json: unsupported kv_cache_quant_algo 'FP9'"), std::string::npos) << e;
}
