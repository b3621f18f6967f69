// ModelOpt config parsing (both forms), algorithm names, exclusion matching, MIXED_PRECISION
// module resolution (issue 3).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "common/error_of.h"
#include "core/error.h"
#include "quant/modelopt_config.h"

using namespace fp4lm;
using namespace fp4lm::quant;
using nlohmann::json;


namespace modelopt_config_test {
namespace {

using fp4lm::test::error_of;

json legacy(json quantization) { return {{"producer", {{"name", "modelopt"}}}, {"quantization", quantization}}; }

json nvfp4_legacy() {
  return legacy({{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16},
                 {"exclude_modules", {"lm_head"}}});
}


}  // namespace

TEST(ModeloptConfig, LegacyHfQuantConfigParses) {
  ModeloptConfig q = parse_modelopt_config(nvfp4_legacy(), json::object(), "/ckpt");
  EXPECT_EQ(q.algo, QuantAlgo::NVFP4);
  EXPECT_EQ(q.group_size, 16);
  EXPECT_FALSE(q.kv_cache_quant_algo.has_value());
  EXPECT_EQ(q.exclude_modules, std::vector<std::string>{"lm_head"});
  EXPECT_EQ(q.source_path, "/ckpt/hf_quant_config.json");
}

TEST(ModeloptConfig, LowerCaseAlgoAccepted) {
  json j = nvfp4_legacy();
  j["quantization"]["quant_algo"] = "w4a16_nvfp4";
  EXPECT_EQ(parse_modelopt_config(j, json::object(), "/c").algo, QuantAlgo::W4A16_NVFP4);
  EXPECT_EQ(parse_algo("nvfp4", "x"), QuantAlgo::NVFP4);
  EXPECT_EQ(parse_algo("Mixed_Precision", "x"), QuantAlgo::MIXED_PRECISION);
  EXPECT_EQ(parse_algo("fp8", "x"), QuantAlgo::FP8);
}

TEST(ModeloptConfig, UnknownAlgoRejectedListingSupported) {
  json j = nvfp4_legacy();
  j["quantization"]["quant_algo"] = "INT4_AWQ";
  std::string e = error_of([&] { parse_modelopt_config(j, json::object(), "/c"); });
  EXPECT_NE(e.find("unknown quant_algo 'INT4_AWQ'"), std::string::npos) << e;
  EXPECT_NE(e.find("NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION"), std::string::npos) << e;
  EXPECT_NE(e.find("/c/hf_quant_config.json"), std::string::npos) << e;
}

TEST(ModeloptConfig, OnlyQuantAlgoIsRequiredInHfQuantConfig) {
  json j = nvfp4_legacy();
  j["quantization"].erase("quant_algo");
  std::string e = error_of([&] { parse_modelopt_config(j, json::object(), "/c"); });
  EXPECT_NE(e.find("missing the required key 'quant_algo'"), std::string::npos) << e;
  for (const char* key : {"kv_cache_quant_algo", "group_size", "exclude_modules"}) {
    json k = nvfp4_legacy();
    k["quantization"].erase(key);
    EXPECT_NO_THROW(parse_modelopt_config(k, json::object(), "/c")) << key;
  }
  // Null values are fine (present but empty).
  j = nvfp4_legacy();
  j["quantization"]["exclude_modules"] = nullptr;
  EXPECT_TRUE(parse_modelopt_config(j, json::object(), "/c").exclude_modules.empty());
}

TEST(ModeloptConfig, GroupSizeMustBe16ForNvfp4) {
  json j = nvfp4_legacy();
  j["quantization"]["group_size"] = 32;
  std::string e = error_of([&] { parse_modelopt_config(j, json::object(), "/c"); });
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
  ModeloptConfig q = parse_modelopt_config(std::nullopt, cfg, "/c");
  EXPECT_EQ(q.algo, QuantAlgo::NVFP4);
  EXPECT_EQ(q.group_size, 16);
  EXPECT_EQ(q.kv_cache_quant_algo, "FP8");
  EXPECT_EQ(q.exclude_modules.size(), 2u);
  // Without quant_algo the config groups decide: weights-only 4-bit float = W4A16_NVFP4.
  cfg["quantization_config"].erase("quant_algo");
  cfg["quantization_config"]["config_groups"]["group_0"].erase("input_activations");
  EXPECT_EQ(parse_modelopt_config(std::nullopt, cfg, "/c").algo, QuantAlgo::W4A16_NVFP4);
}

TEST(ModeloptConfig, OtherQuantMethodRejected) {
  json cfg = {{"quantization_config", {{"quant_method", "bitsandbytes"}, {"bits", 4}}}};
  std::string e = error_of([&] { parse_quant_config(std::nullopt, cfg, "/c"); });
  EXPECT_NE(e.find("unsupported quant_method 'bitsandbytes'"), std::string::npos) << e;
}

// AMD Quark's NVFP4 export, in the form vLLM's QuarkConfig reads (a replica of its
// quantization_config: weight and input each a [fp4 per-group 16, fp8_e4m3 per-tensor] pair,
// tensors weight / weight_scale / weight_scale_2 / input_scale_2): refused by name, saying what is
// undocumented (docs/FORMAT.md, "AMD Quark").
TEST(ModeloptConfig, QuarkNvfp4IsRefusedNamingWhatIsUndocumented) {
  const json fp4 = {{"dtype", "fp4"}, {"qscheme", "per_group"}, {"group_size", 16}, {"ch_axis", -1},
                    {"is_dynamic", false}, {"scale_format", "e4m3"}};
  json fp4_in = fp4;
  fp4_in["is_dynamic"] = true;
  const json fp8 = {{"dtype", "fp8_e4m3"}, {"qscheme", "per_tensor"}, {"is_dynamic", false}};
  const json cfg = {{"quantization_config",
                     {{"quant_method", "quark"},
                      {"export", {{"kv_cache_group", json::array()}, {"pack_method", "reorder"}}},
                      {"global_quant_config",
                       {{"weight", {fp4, fp8}}, {"input_tensors", {fp4_in, fp8}}, {"output_tensors", nullptr}}},
                      {"layer_quant_config", json::object()},
                      {"exclude", {"lm_head"}}}}};
  const std::string e = error_of([&] { parse_quant_config(std::nullopt, cfg, "/c"); });
  EXPECT_NE(e.find("/c/config.json: quantization_config: quant_method \"quark\" (AMD Quark) is refused"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("nibble order of the packed fp4 codes under export.pack_method"), std::string::npos) << e;
  EXPECT_NE(e.find("whether weight_scale_2 and input_scale_2 multiply or divide"), std::string::npos) << e;
}

TEST(ModeloptConfig, ConfigJsonWinsAndADisagreementIsRecordedNotAnError) {
  json cfg = {{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "W4A16_NVFP4"}, {"ignore", {"lm_head"}}}}};
  ModeloptConfig q = parse_modelopt_config(nvfp4_legacy(), cfg, "/c");
  EXPECT_EQ(q.algo, QuantAlgo::W4A16_NVFP4);  // config.json's quantization_config first, as vLLM
  EXPECT_EQ(q.source_path, "/c/config.json: quantization_config");
  ASSERT_NE(q.other, nullptr);
  EXPECT_EQ(q.other->algo, QuantAlgo::NVFP4);
  EXPECT_EQ(q.other->source_path, "/c/hf_quant_config.json");
  EXPECT_EQ(q.disagreement, "quant_algo W4A16_NVFP4 vs NVFP4");
  // Agreeing files: no `other`.
  cfg["quantization_config"]["quant_algo"] = "nvfp4";
  q = parse_modelopt_config(nvfp4_legacy(), cfg, "/c");
  EXPECT_EQ(q.other, nullptr);
  EXPECT_EQ(q.algo, QuantAlgo::NVFP4);
  cfg["quantization_config"]["ignore"] = {"lm_head", "model.layers.0"};
  EXPECT_EQ(parse_modelopt_config(nvfp4_legacy(), cfg, "/c").disagreement, "exclusions differ");
}

// ---- The config shapes published checkpoints carry (issue 11; docs/FORMAT.md §7) ----

TEST(PublishedConfigs, Fp8WithoutGroupSizeOrExcludeModules) {
  // Llama-3.1-70B-Instruct-FP8 / Qwen3-32B-FP8 style.
  json hf = {{"producer", {{"name", "modelopt"}, {"version", "0.15.0"}}},
             {"quantization", {{"quant_algo", "FP8"}, {"kv_cache_quant_algo", "FP8"}}}};
  ModeloptConfig q = parse_modelopt_config(hf, json::object(), "/c");
  EXPECT_EQ(q.algo, QuantAlgo::FP8);
  EXPECT_FALSE(q.group_size.has_value());
  EXPECT_TRUE(q.exclude_modules.empty());
  EXPECT_EQ(q.kv_cache_quant_algo, "FP8");
  EXPECT_EQ(module_algo(q, "model.layers.3.mlp.down_proj"), QuantAlgo::FP8);
  hf["quantization"]["exclude_modules"] = {"lm_head"};
  EXPECT_EQ(module_algo(parse_modelopt_config(hf, json::object(), "/c"), "lm_head"), QuantAlgo::None);
}

TEST(PublishedConfigs, MixedPrecisionWithoutGroupSize) {
  // nvidia/Qwen3.6-35B-A3B-NVFP4's hf_quant_config.json, in miniature.
  json hf = {{"producer", {{"name", "modelopt"}, {"version", "0.44.0"}}},
             {"quantization",
              {{"quant_algo", "MIXED_PRECISION"},
               {"kv_cache_quant_algo", "FP8"},
               {"exclude_modules", {"mtp*", "model.visual*"}},
               {"quantized_layers",
                {{"model.language_model.layers.0.mlp.experts", {{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}}},
                 {"model.language_model.layers.0.mlp.shared_expert.gate_proj", {{"quant_algo", "W4A16_NVFP4"}}},
                 {"model.language_model.layers.3.self_attn.q_proj", {{"quant_algo", "FP8"}}},
                 {"lm_head", {{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}}}}}}}};
  ModeloptConfig q = parse_modelopt_config(hf, json::object(), "/c");
  EXPECT_EQ(q.algo, QuantAlgo::MIXED_PRECISION);
  EXPECT_FALSE(q.group_size.has_value());
  EXPECT_EQ(q.quantized_layers.at("model.language_model.layers.0.mlp.shared_expert.gate_proj").group_size, 16);
  EXPECT_FALSE(q.quantized_layers.at("model.language_model.layers.3.self_attn.q_proj").group_size.has_value());
  EXPECT_EQ(module_algo(q, "model.language_model.layers.0.mlp.experts.7.up_proj"), QuantAlgo::W4A16_NVFP4);
  EXPECT_EQ(module_algo(q, "model.language_model.layers.3.self_attn.q_proj"), QuantAlgo::FP8);
  EXPECT_EQ(module_algo(q, "model.language_model.layers.3.mlp.gate"), QuantAlgo::None);
  EXPECT_EQ(module_algo(q, "mtp.layers.0.mlp.experts.0.up_proj"), QuantAlgo::None);
  // A per-layer group size other than 16 for an NVFP4 entry stays an error.
  hf["quantization"]["quantized_layers"]["lm_head"]["group_size"] = 32;
  std::string e = error_of([&] { parse_modelopt_config(hf, json::object(), "/c"); });
  EXPECT_NE(e.find("quantized_layers['lm_head']: group_size must be 16 for W4A16_NVFP4 (found 32)"), std::string::npos)
      << e;
}

TEST(PublishedConfigs, MixedPrecisionConfigJsonTakesModulesFromConfigGroupTargets) {
  json fp8 = {{"num_bits", 8}, {"type", "float"}, {"dynamic", false}};
  json nvfp4 = {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}, {"dynamic", false}};
  json cfg = {{"quantization_config",
               {{"quant_method", "modelopt"},
                {"quant_algo", "MIXED_PRECISION"},
                {"kv_cache_scheme", {{"num_bits", 8}, {"type", "float"}}},
                {"config_groups",
                 {{"group_0", {{"weights", fp8}, {"input_activations", fp8}, {"targets", {"model.layers.0.self_attn.q_proj"}}}},
                  {"group_1", {{"weights", nvfp4}, {"targets", {"model.layers.0.mlp.experts"}}}}}},
                {"ignore", {"lm_head"}}}}};
  ModeloptConfig q = parse_modelopt_config(std::nullopt, cfg, "/c");
  EXPECT_EQ(q.algo, QuantAlgo::MIXED_PRECISION);
  EXPECT_EQ(q.quantized_layers.size(), 2u);
  EXPECT_EQ(module_algo(q, "model.layers.0.self_attn.q_proj"), QuantAlgo::FP8);
  EXPECT_EQ(module_algo(q, "model.layers.0.mlp.experts.1.down_proj"), QuantAlgo::W4A16_NVFP4);
  EXPECT_EQ(q.quantized_layers.at("model.layers.0.mlp.experts").group_size, 16);
  EXPECT_EQ(q.kv_cache_quant_algo, "FP8");
  // A group of an unsupported format is an error naming it.
  cfg["quantization_config"]["config_groups"]["group_1"]["weights"]["num_bits"] = 3;
  std::string e = error_of([&] { parse_modelopt_config(std::nullopt, cfg, "/c"); });
  EXPECT_NE(e.find("config_groups['group_1'] describes no supported format"), std::string::npos) << e;
}

TEST(PublishedConfigs, ConfigJsonWithoutQuantMethodIsModeloptsWhenSomethingSaysSo) {
  // As ModelOpt writes it: no quant_method, kv_cache_scheme the bare string "FP8".
  json nvfp4 = {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}};
  json qc = {{"config_groups", {{"group_0", {{"weights", nvfp4}, {"input_activations", nvfp4}, {"targets", {"Linear"}}}}}},
             {"ignore", {"lm_head"}},
             {"kv_cache_scheme", "FP8"},
             {"producer", {{"name", "modelopt"}, {"version", "0.37.0"}}}};
  ModeloptConfig q = parse_modelopt_config(std::nullopt, {{"quantization_config", qc}}, "/c");
  EXPECT_EQ(q.algo, QuantAlgo::NVFP4);
  EXPECT_EQ(q.group_size, 16);
  EXPECT_EQ(q.kv_cache_quant_algo, "FP8");
  EXPECT_EQ(q.exclude_modules, std::vector<std::string>{"lm_head"});
  // quant_algo alone says so too.
  json by_algo = {{"quant_algo", "FP8"}};
  EXPECT_EQ(parse_modelopt_config(std::nullopt, {{"quantization_config", by_algo}}, "/c").algo, QuantAlgo::FP8);
  // Neither producer nor quant_algo: only a hf_quant_config.json beside it makes it ModelOpt's.
  qc.erase("producer");
  std::string e = error_of([&] { parse_modelopt_config(std::nullopt, {{"quantization_config", qc}}, "/c"); });
  EXPECT_NE(e.find("/c/config.json: quantization_config: no quant_method"), std::string::npos) << e;
  EXPECT_EQ(parse_modelopt_config(nvfp4_legacy(), {{"quantization_config", qc}}, "/c").algo, QuantAlgo::NVFP4);
  // A quant_method of another kind, or of the wrong type, stays an error.
  qc["quant_method"] = 7;
  e = error_of([&] { parse_modelopt_config(std::nullopt, {{"quantization_config", qc}}, "/c"); });
  EXPECT_NE(e.find("quant_method must be a string, found 7"), std::string::npos) << e;
}

TEST(PublishedConfigs, KvCacheSchemeStringOrObjectElseAnError) {
  json qc = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}};
  for (const json& kv : {json("FP8"), json({{"num_bits", 8}, {"type", "float"}, {"dynamic", false}})}) {
    qc["kv_cache_scheme"] = kv;
    EXPECT_EQ(parse_modelopt_config(std::nullopt, {{"quantization_config", qc}}, "/c").kv_cache_quant_algo, "FP8");
  }
  qc["kv_cache_scheme"] = nullptr;
  EXPECT_FALSE(parse_modelopt_config(std::nullopt, {{"quantization_config", qc}}, "/c").kv_cache_quant_algo);
  for (const json& bad : {json(8), json({{"num_bits", 4}, {"type", "int"}})}) {
    qc["kv_cache_scheme"] = bad;
    std::string e = error_of([&] { parse_modelopt_config(std::nullopt, {{"quantization_config", qc}}, "/c"); });
    EXPECT_NE(e.find("kv_cache_scheme must be a string such as \"FP8\" or an object"), std::string::npos) << e;
  }
}

TEST(PublishedConfigs, NemotronStyleMinimalFile) {
  json hf = {{"producer", {{"name", "modelopt"}, {"version", "0.23.0"}}},
             {"quantization", {{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", "FP8"}}}};
  ModeloptConfig q = parse_modelopt_config(hf, json::object(), "/c");
  EXPECT_EQ(q.algo, QuantAlgo::NVFP4);
  EXPECT_EQ(q.group_size, 16);  // NVFP4 without group_size: 16 (logged at debug)
  EXPECT_TRUE(q.exclude_modules.empty());
  EXPECT_EQ(q.kv_cache_quant_algo, "FP8");
}

TEST(PublishedConfigs, UnknownAlgorithmsAndMalformedValuesStayErrors) {
  json hf = {{"quantization", {{"quant_algo", "INT8_SQ"}}}};
  EXPECT_NE(error_of([&] { parse_modelopt_config(hf, json::object(), "/c"); }).find("unknown quant_algo 'INT8_SQ'"),
            std::string::npos);
  hf = {{"quantization", {{"quant_algo", "FP8"}, {"exclude_modules", "lm_head"}}}};
  EXPECT_NE(error_of([&] { parse_modelopt_config(hf, json::object(), "/c"); })
                .find("exclude_modules must be a list of strings or null, found \"lm_head\""),
            std::string::npos);
  hf = {{"quantization", {{"quant_algo", "NVFP4"}, {"group_size", "16"}}}};
  EXPECT_NE(error_of([&] { parse_modelopt_config(hf, json::object(), "/c"); })
                .find("group_size must be an integer or null, found \"16\""),
            std::string::npos);
  hf = {{"quantization", {{"quant_algo", "FP8"}, {"kv_cache_quant_algo", 8}}}};
  EXPECT_NE(error_of([&] { parse_modelopt_config(hf, json::object(), "/c"); }).find("kv_cache_quant_algo must be a string"),
            std::string::npos);
  json cfg = {{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "W4A8_AWQ"}}}};
  EXPECT_NE(error_of([&] { parse_modelopt_config(std::nullopt, cfg, "/c"); }).find("quant_algo 'W4A8_AWQ' (ModelOpt's int4"),
            std::string::npos);
}

TEST(PublishedConfigs, DisagreeingMixedFilesListTheModulesThatDiffer) {
  // The published disagreement: hf_quant_config.json says W4A16 for the experts, config.json's
  // config_groups give them 4-bit activations.
  json hf = {{"producer", {{"name", "modelopt"}, {"version", "0.44.0"}}},
             {"quantization",
              {{"quant_algo", "MIXED_PRECISION"},
               {"quantized_layers",
                {{"model.layers.0.mlp.experts", {{"quant_algo", "W4A16_NVFP4"}, {"group_size", 16}}},
                 {"model.layers.0.self_attn.q_proj", {{"quant_algo", "FP8"}}}}}}}};
  json nvfp4 = {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}};
  json fp8 = {{"num_bits", 8}, {"type", "float"}};
  json cfg = {{"quantization_config",
               {{"quant_algo", "MIXED_PRECISION"},
                {"producer", {{"name", "modelopt"}, {"version", "0.43.0"}}},
                {"config_groups",
                 {{"group_0", {{"weights", nvfp4}, {"input_activations", nvfp4}, {"targets", {"model.layers.0.mlp.experts"}}}},
                  {"group_1", {{"weights", fp8}, {"input_activations", fp8}, {"targets", {"model.layers.0.self_attn.q_proj"}}}}}}}}};
  ModeloptConfig q = parse_modelopt_config(hf, cfg, "/c");
  ASSERT_NE(q.other, nullptr);
  EXPECT_EQ(q.disagreement, "1 per-layer entries differ (first: model.layers.0.mlp.experts: NVFP4 vs W4A16_NVFP4)");
  EXPECT_EQ(module_algo(q, "model.layers.0.mlp.experts.0.w1"), QuantAlgo::NVFP4);
  EXPECT_EQ(module_algo(*q.other, "model.layers.0.mlp.experts.0.w1"), QuantAlgo::W4A16_NVFP4);
}

TEST(ModeloptConfig, NoConfigMeansUnquantized) {
  ModeloptConfig q = parse_modelopt_config(std::nullopt, json::object(), "/c");
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
  ModeloptConfig q = parse_modelopt_config(j, json::object(), "/c");
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
  EXPECT_NE(error_of([&] { parse_modelopt_config(j, json::object(), "/c"); }).find("group_size must be 16"),
            std::string::npos);
  j["quantization"]["quantized_layers"] = {{"a", {{"quant_algo", "BOGUS"}}}};
  EXPECT_NE(error_of([&] { parse_modelopt_config(j, json::object(), "/c"); }).find("unknown quant_algo 'BOGUS'"),
            std::string::npos);
  j["quantization"].erase("quantized_layers");
  EXPECT_NE(error_of([&] { parse_modelopt_config(j, json::object(), "/c"); }).find("quantized_layers"),
            std::string::npos);
}

TEST(ModeloptConfig, UnknownKvCacheAlgoRejected) {
  for (const char* ok : {"FP8", "fp8", "NVFP4", "NVFP4_AFFINE", "INT8"}) {
    json j = nvfp4_legacy();
    j["quantization"]["kv_cache_quant_algo"] = ok;
    EXPECT_EQ(parse_modelopt_config(j, json::object(), "/c").kv_cache_quant_algo, ok);
  }
  json j = nvfp4_legacy();
  j["quantization"]["kv_cache_quant_algo"] = "FP9";
  std::string e = error_of([&] { parse_modelopt_config(j, json::object(), "/c"); });
  EXPECT_NE(e.find("/c/hf_quant_config.json: unsupported kv_cache_quant_algo 'FP9'"), std::string::npos) << e;
}

// Issue 44: every quant_algo ModelOpt's unified HF export writes is run or refused by name.
TEST(ModeloptAlgorithms, EveryAlgorithmModeloptWritesIsRunOrRefusedByName) {
  for (const char* runs : {"NVFP4", "NVFP4_AWQ", "W4A16_NVFP4", "FP8", "MIXED_PRECISION", "W4A16_AWQ", "W4A8_NVFP4_FP8",
                           "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "fp8_pb_wo", "MXFP8", "W8A16", "w8a16",
                           "W8A8_SQ_PER_CHANNEL", "W4A8_MXFP4_FP8", "NVFP4_SVD"})
    EXPECT_NO_THROW(parse_algo(runs, "/c")) << runs;
  for (const char* refused : {"W4A8_AWQ", "fp8_pb_real", "mxfp4"}) {
    json j = legacy({{"quant_algo", refused}});
    const std::string e = error_of([&] { parse_modelopt_config(j, json::object(), "/c"); });
    EXPECT_NE(e.find(fmt::format("quant_algo '{}' (ModelOpt's ", refused)), std::string::npos) << e;
    EXPECT_NE(e.find("is not supported by fp4lm"), std::string::npos) << e;
    // The same in a MIXED_PRECISION entry.
    j = legacy({{"quant_algo", "MIXED_PRECISION"}, {"quantized_layers", {{"model.layers.0.mlp", {{"quant_algo", refused}}}}}});
    EXPECT_NE(error_of([&] { parse_modelopt_config(j, json::object(), "/c"); }).find(refused), std::string::npos);
  }
}

// ModelOpt 0.47.0's W4A8_MXFP4_FP8 (group_size 32) and NVFP4_SVD (group_size 16, pre_quant_scale,
// and in the diffusers export a lora_rank; config.json puts the rank in its config group).
TEST(ModeloptAlgorithms, W4a8Mxfp4Fp8AndNvfp4SvdAsTheExportWritesThem) {
  const ModeloptConfig mx = parse_modelopt_config(
      legacy({{"quant_algo", "W4A8_MXFP4_FP8"}, {"group_size", 32}, {"exclude_modules", {"lm_head"}}}),
      json::object(), "/c");
  EXPECT_EQ(mx.algo, QuantAlgo::W4A8_MXFP4_FP8);
  EXPECT_EQ(mx.module_scheme("model.layers.0.mlp.down_proj", {}), Scheme::mxfp4_fp8);
  EXPECT_EQ(mx.module_scheme("lm_head", {}), Scheme::unquantized);
  EXPECT_NE(error_of([&] {
              parse_modelopt_config(legacy({{"quant_algo", "W4A8_MXFP4_FP8"}, {"group_size", 16}}), json::object(), "/c");
            }).find("group_size must be 32 for W4A8_MXFP4_FP8"),
            std::string::npos);
  const ModeloptConfig svd = parse_modelopt_config(
      legacy({{"quant_algo", "NVFP4_SVD"}, {"group_size", 16}, {"has_zero_point", false}, {"pre_quant_scale", true},
              {"lora_rank", 32}}),
      json::object(), "/c");
  EXPECT_EQ(svd.algo, QuantAlgo::NVFP4_SVD);
  EXPECT_EQ(svd.module_scheme("model.layers.0.mlp.down_proj", {}), Scheme::nvfp4);
  EXPECT_TRUE(svd.pre_quant_scale);
  EXPECT_EQ(svd.lora_rank, 32);
  const json cfg = {{"quantization_config",
                     {{"quant_method", "modelopt"},
                      {"quant_algo", "NVFP4_SVD"},
                      {"ignore", {"lm_head"}},
                      {"config_groups",
                       {{"group_0",
                         {{"weights", {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}}},
                          {"input_activations", {{"num_bits", 4}, {"type", "float"}, {"group_size", 16}}},
                          {"has_zero_point", false},
                          {"pre_quant_scale", true},
                          {"lora_rank", 8},
                          {"targets", {"Linear"}}}}}}}}};
  const ModeloptConfig from_json = parse_modelopt_config(std::nullopt, cfg, "/c");
  EXPECT_EQ(from_json.algo, QuantAlgo::NVFP4_SVD);
  EXPECT_EQ(from_json.group_size, 16);
  EXPECT_EQ(from_json.lora_rank, 8);
  EXPECT_NE(error_of([&] {
              parse_modelopt_config(legacy({{"quant_algo", "NVFP4"}, {"lora_rank", 8}}), json::object(), "/c");
            }).find("lora_rank 8 is SVDQuant's (NVFP4_SVD), but quant_algo is NVFP4"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_modelopt_config(legacy({{"quant_algo", "NVFP4_SVD"}, {"lora_rank", 0}}), json::object(), "/c");
            }).find("lora_rank must be a positive integer"),
            std::string::npos);
  // In a MIXED_PRECISION entry.
  const ModeloptConfig mixed = parse_modelopt_config(
      legacy({{"quant_algo", "MIXED_PRECISION"},
              {"quantized_layers",
               {{"model.layers.0.mlp.down_proj", {{"quant_algo", "W4A8_MXFP4_FP8"}, {"group_size", 32}}},
                {"model.layers.0.mlp.up_proj",
                 {{"quant_algo", "NVFP4_SVD"}, {"group_size", 16}, {"pre_quant_scale", true}}}}}}),
      json::object(), "/c");
  EXPECT_EQ(mixed.module_scheme("model.layers.0.mlp.down_proj", {}), Scheme::mxfp4_fp8);
  EXPECT_EQ(mixed.module_scheme("model.layers.0.mlp.up_proj", {}), Scheme::nvfp4);
}

// ModelOpt 0.47.0 writes FP8_PB_WO under its raw name and no group_size; MXFP8 with group_size 32.
TEST(ModeloptAlgorithms, Fp8PbWoAndMxfp8AsTheExportWritesThem) {
  const ModeloptConfig pb = parse_modelopt_config(
      legacy({{"quant_algo", "fp8_pb_wo"}, {"kv_cache_quant_algo", nullptr}, {"exclude_modules", {"lm_head"}}}),
      json::object(), "/c");
  EXPECT_EQ(pb.algo, QuantAlgo::FP8_PB_WO);
  EXPECT_EQ(pb.module_scheme("model.layers.0.mlp.down_proj", {}), Scheme::fp8_block_a16);
  EXPECT_EQ(pb.weight_block("model.layers.0.mlp.down_proj"), (std::pair<int64_t, int64_t>{128, 128}));
  EXPECT_EQ(pb.weight_block("lm_head"), (std::pair<int64_t, int64_t>{0, 0}));
  const ModeloptConfig mx = parse_modelopt_config(legacy({{"quant_algo", "MXFP8"}, {"group_size", 32}}),
                                                  json::object(), "/c");
  EXPECT_EQ(mx.module_scheme("model.layers.0.mlp.down_proj", {}), Scheme::mxfp8);
  EXPECT_EQ(mx.weight_block("model.layers.0.mlp.down_proj"), (std::pair<int64_t, int64_t>{1, 32}));
  // In a MIXED_PRECISION entry, as process_layer_quant_config writes it.
  const ModeloptConfig mixed = parse_modelopt_config(
      legacy({{"quant_algo", "MIXED_PRECISION"},
              {"quantized_layers",
               {{"model.layers.0.mlp.down_proj", {{"quant_algo", "MXFP8"}, {"group_size", 32}}},
                {"model.layers.0.mlp.up_proj", {{"quant_algo", "fp8_pb_wo"}}}}}}),
      json::object(), "/c");
  EXPECT_EQ(mixed.module_scheme("model.layers.0.mlp.down_proj", {}), Scheme::mxfp8);
  EXPECT_EQ(mixed.module_scheme("model.layers.0.mlp.up_proj", {}), Scheme::fp8_block_a16);
  EXPECT_NE(error_of([&] { parse_modelopt_config(legacy({{"quant_algo", "MXFP8"}, {"group_size", 16}}),
                                                 json::object(), "/c"); })
                .find("group_size must be 32 for MXFP8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_modelopt_config(legacy({{"quant_algo", "FP8_PB_WO"}, {"group_size", 64}}),
                                                 json::object(), "/c"); })
                .find("FP8_PB_WO's export writes no group_size"),
            std::string::npos);
}

TEST(ModeloptAlgorithms, Nvfp4AwqIsNvfp4WithPreQuantScale) {
  const ModeloptConfig q = parse_modelopt_config(
      legacy({{"quant_algo", "NVFP4_AWQ"}, {"group_size", 16}, {"has_zero_point", false}, {"pre_quant_scale", true},
              {"exclude_modules", {"lm_head"}}}),
      json::object(), "/c");
  EXPECT_EQ(q.algo, QuantAlgo::NVFP4_AWQ);
  EXPECT_TRUE(q.pre_quant_scale);
  EXPECT_EQ(q.module_scheme("model.layers.0.mlp.down_proj", {}), Scheme::nvfp4);
  EXPECT_TRUE(q.declares(Scheme::nvfp4));
  EXPECT_NE(error_of([&] { parse_modelopt_config(legacy({{"quant_algo", "NVFP4_AWQ"}, {"group_size", 128}}),
                                                 json::object(), "/c"); })
                .find("group_size must be 16"),
            std::string::npos);
}

// nvidia/DeepSeek-R1-0528-NVFP4's hf_quant_config.json as issue 44 quotes it: quant_algo NVFP4 with
// pre_quant_scale true (exclusions abridged).
TEST(ModeloptAlgorithms, DeepSeekR1Nvfp4ReplicaDeclaresPreQuantScale) {
  const json j = {{"producer", {{"name", "modelopt"}, {"version", "0.31.0"}}},
                  {"quantization",
                   {{"quant_algo", "NVFP4"},
                    {"kv_cache_quant_algo", nullptr},
                    {"group_size", 16},
                    {"exclude_modules", {"lm_head", "model.layers.0.self_attn*", "model.layers.61*"}},
                    {"pre_quant_scale", true}}}};
  const ModeloptConfig q = parse_modelopt_config(j, json::object(), "/c");
  EXPECT_EQ(q.algo, QuantAlgo::NVFP4);
  EXPECT_TRUE(q.pre_quant_scale);
}

TEST(ModeloptAlgorithms, EveryQuantizationKeyHasAnEffectOrIsRefusedByName) {
  json j = nvfp4_legacy();
  j["quantization"]["awq_block_size"] = 16;
  std::string e = error_of([&] { parse_modelopt_config(j, json::object(), "/c"); });
  EXPECT_NE(e.find("/c/hf_quant_config.json: quantization: unknown quantization key 'awq_block_size'"), std::string::npos)
      << e;
  j = nvfp4_legacy();
  j["quantization"]["has_zero_point"] = true;
  e = error_of([&] { parse_modelopt_config(j, json::object(), "/c"); });
  EXPECT_NE(e.find("has_zero_point true"), std::string::npos) << e;
  j["quantization"]["has_zero_point"] = false;
  EXPECT_NO_THROW(parse_modelopt_config(j, json::object(), "/c"));
  j["quantization"]["pre_quant_scale"] = "yes";
  EXPECT_NE(error_of([&] { parse_modelopt_config(j, json::object(), "/c"); }).find("pre_quant_scale must be a boolean"),
            std::string::npos);
  json cfg = {{"quantization_config", {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"lora_rank", 32}}}};
  e = error_of([&] { parse_modelopt_config(std::nullopt, cfg, "/c"); });
  // NVFP4_SVD's key: with another algorithm it names a branch that algorithm has not.
  EXPECT_NE(e.find("lora_rank 32 is SVDQuant's (NVFP4_SVD), but quant_algo is NVFP4"), std::string::npos) << e;
  j = legacy({{"quant_algo", "MIXED_PRECISION"},
              {"quantized_layers", {{"a", {{"quant_algo", "NVFP4"}, {"svd_rank", 8}}}}}});
  EXPECT_NE(error_of([&] { parse_modelopt_config(j, json::object(), "/c"); }).find("unknown quantization key 'svd_rank'"),
            std::string::npos);
}


// ModelOpt 0.47.0's INT8_WEIGHT_ONLY_CFG / INT8_SMOOTHQUANT_CFG exports (tests/model/fixtures/modelopt_w8a16,
// modelopt_w8a8_sq): no group_size; one would say a grouped layout.
TEST(ModeloptAlgorithms, Int8AlgorithmsAsTheExportWritesThem) {
  const ModeloptConfig wo = parse_modelopt_config(
      legacy({{"quant_algo", "W8A16"}, {"kv_cache_quant_algo", nullptr}, {"exclude_modules", {"lm_head"}}}),
      json::object(), "/c");
  EXPECT_EQ(wo.algo, QuantAlgo::W8A16);
  EXPECT_EQ(wo.module_scheme("model.layers.0.mlp.down_proj", {}), Scheme::int8_a16);
  EXPECT_EQ(wo.module_scheme("lm_head", {}), Scheme::unquantized);
  const ModeloptConfig sq = parse_modelopt_config(legacy({{"quant_algo", "W8A8_SQ_PER_CHANNEL"}}), json::object(), "/c");
  EXPECT_EQ(sq.module_scheme("model.layers.0.self_attn.q_proj", {}), Scheme::int8_sq);
  const ModeloptConfig mixed = parse_modelopt_config(
      legacy({{"quant_algo", "MIXED_PRECISION"},
              {"quantized_layers",
               {{"model.layers.0.mlp.down_proj", {{"quant_algo", "W8A16"}}},
                {"model.layers.0.mlp.up_proj", {{"quant_algo", "W8A8_SQ_PER_CHANNEL"}}}}}}),
      json::object(), "/c");
  EXPECT_EQ(mixed.module_scheme("model.layers.0.mlp.down_proj", {}), Scheme::int8_a16);
  EXPECT_EQ(mixed.module_scheme("model.layers.0.mlp.up_proj", {}), Scheme::int8_sq);
  for (const char* algo : {"W8A16", "W8A8_SQ_PER_CHANNEL"}) {
    const std::string e = error_of(
        [&] { parse_modelopt_config(legacy({{"quant_algo", algo}, {"group_size", 128}}), json::object(), "/c"); });
    EXPECT_NE(e.find(fmt::format("{} scales int8 weights per output channel and has no group_size (found 128)", algo)),
              std::string::npos)
        << e;
  }
}

}  // namespace modelopt_config_test
