// compressed-tensors configs (quant/compressed_tensors_config.h): groups to schemes, targets and
// ignore entries by name, "re:" (matched from the start, as Python's re.match) and class name,
// kv_cache_scheme, and the errors for what fp4lm does not read.
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "core/error.h"
#include "quant/compressed_tensors_config.h"
#include "quant/quant_config.h"

namespace fp4lm::quant::compressed_tensors_config_test {
namespace {

using nlohmann::json;
using test::error_of;

json nvfp4_args() {
  return {{"num_bits", 4}, {"type", "float"}, {"strategy", "tensor_group"}, {"group_size", 16}, {"symmetric", true},
          {"dynamic", false}};
}
json fp8_args(const char* strategy, bool dynamic = false) {
  return {{"num_bits", 8}, {"type", "float"}, {"strategy", strategy}, {"symmetric", true}, {"dynamic", dynamic}};
}

json config(const std::string& format, const json& groups, const json& ignore = json::array()) {
  return {{"quantization_config",
           {{"quant_method", "compressed-tensors"},
            {"format", format},
            {"quantization_status", "compressed"},
            {"config_groups", groups},
            {"ignore", ignore},
            {"kv_cache_scheme", nullptr}}}};
}

std::shared_ptr<const QuantConfig> parse(const json& cfg) { return parse_quant_config(std::nullopt, cfg, "/c"); }

const ModuleTensors kNone;

TEST(CompressedTensorsConfig, DispatchedByQuantMethodWithItsSchemes) {
  json act = nvfp4_args();
  act["dynamic"] = "local";
  auto q = parse(config("nvfp4-pack-quantized",
                        {{"group_0", {{"targets", {"Linear"}}, {"weights", nvfp4_args()}, {"input_activations", act}}}},
                        {"lm_head", "re:.*mlp\\.gate$"}));
  EXPECT_EQ(q->family(), Family::compressed_tensors);
  EXPECT_EQ(q->source(), "/c/config.json: quantization_config");
  EXPECT_TRUE(q->declares(Scheme::nvfp4));
  EXPECT_EQ(q->module_scheme("model.layers.0.self_attn.q_proj", kNone), Scheme::nvfp4);
  EXPECT_EQ(q->module_scheme("lm_head", kNone), Scheme::unquantized);
  EXPECT_EQ(q->module_scheme("model.layers.3.mlp.gate", kNone), Scheme::unquantized);
  EXPECT_EQ(q->module_scheme("model.layers.3.mlp.gate_proj", kNone), Scheme::nvfp4);  // "$" anchors the end
  EXPECT_NE(q->describe().find("NVFP4 W4A4"), std::string::npos) << q->describe();

  auto a16 = parse(config("nvfp4-pack-quantized", {{"g", {{"targets", {"Linear"}}, {"weights", nvfp4_args()}}}}));
  EXPECT_EQ(a16->module_scheme("model.layers.0.mlp.down_proj", kNone), Scheme::nvfp4_a16);
}

TEST(CompressedTensorsConfig, Fp8WeightAndActivationVariants) {
  auto scheme_of = [](const json& group) {
    return parse(config("float-quantized", {{"g", group}}))->module_scheme("model.layers.0.mlp.up_proj", kNone);
  };
  EXPECT_EQ(scheme_of({{"targets", {"Linear"}}, {"weights", fp8_args("channel")}}), Scheme::fp8_a16);
  EXPECT_EQ(scheme_of({{"targets", {"Linear"}}, {"weights", fp8_args("tensor")}, {"input_activations", fp8_args("tensor")}}),
            Scheme::fp8);
  EXPECT_EQ(scheme_of({{"targets", {"Linear"}}, {"weights", fp8_args("channel")},
                       {"input_activations", fp8_args("token", true)}}),
            Scheme::fp8_dynamic);
}

TEST(CompressedTensorsConfig, MixedPrecisionFirstNameMatchThenClass) {
  json groups = {
      {"fp8", {{"targets", {"re:.*self_attn"}}, {"weights", fp8_args("tensor")}, {"format", "float-quantized"}}},
      {"nvfp4", {{"targets", {"Linear"}}, {"weights", nvfp4_args()}, {"format", "nvfp4-pack-quantized"}}},
      {"head", {{"targets", {"lm_head"}}, {"weights", fp8_args("channel")}, {"format", "float-quantized"}}}};
  auto q = parse(config("mixed-precision", groups, {"re:model\\.layers\\.1\\."}));
  EXPECT_EQ(q->module_scheme("model.layers.0.self_attn.o_proj", kNone), Scheme::fp8_a16);  // re:, not the class
  EXPECT_EQ(q->module_scheme("model.layers.0.mlp.down_proj", kNone), Scheme::nvfp4_a16);   // the class
  EXPECT_EQ(q->module_scheme("lm_head", kNone), Scheme::fp8_a16);                          // by full name
  EXPECT_EQ(q->module_scheme("model.layers.1.mlp.down_proj", kNone), Scheme::unquantized); // ignored
  EXPECT_EQ(q->module_scheme("model.layers.10.mlp.down_proj", kNone), Scheme::nvfp4_a16);  // "1\\." is not "10"
  // re: matches from the start only (re.match), not anywhere (re.search).
  auto anchored = parse(config("float-quantized", {{"g", {{"targets", {"re:self_attn"}}, {"weights", fp8_args("tensor")}}}}));
  EXPECT_EQ(anchored->module_scheme("model.layers.0.self_attn.q_proj", kNone), Scheme::unquantized);
  // A mixed-precision group without its own format cannot be read.
  json no_format = groups;
  no_format["fp8"].erase("format");
  EXPECT_NE(error_of([&] { parse(config("mixed-precision", no_format)); }).find("each group needs its own 'format'"),
            std::string::npos);
}

TEST(CompressedTensorsConfig, VlPrefixMatchesTheFileNames) {
  auto q = parse(config("float-quantized",
                        {{"g", {{"targets", {"re:model\\.language_model\\..*"}}, {"weights", fp8_args("tensor")}}}},
                        {"model.language_model.layers.0.mlp.down_proj"}));
  auto read = q->with_prefix("model.language_model.", "model.");
  EXPECT_EQ(read->module_scheme("model.layers.1.mlp.down_proj", kNone), Scheme::fp8_a16);
  EXPECT_EQ(read->module_scheme("model.layers.0.mlp.down_proj", kNone), Scheme::unquantized);
}

TEST(CompressedTensorsConfig, KvCacheScheme) {
  json cfg = config("float-quantized", {{"g", {{"targets", {"Linear"}}, {"weights", fp8_args("tensor")}}}});
  cfg["quantization_config"]["kv_cache_scheme"] = fp8_args("tensor");
  EXPECT_EQ(parse(cfg)->kv_cache_scheme(), "FP8");
  cfg["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 4}, {"type", "float"}};
  EXPECT_NE(error_of([&] { parse(cfg); }).find("kv_cache_scheme"), std::string::npos);
}

TEST(CompressedTensorsConfigBad, ClearErrors) {
  auto err = [](const json& cfg) { return error_of([&] { parse(cfg); }); };
  json cfg = config("nvfp4-pack-quantized", {{"g", {{"targets", {"Linear"}}, {"weights", nvfp4_args()}}}});
  cfg["quantization_config"]["quantization_status"] = "frozen";
  EXPECT_NE(err(cfg).find("quantization_status 'frozen'"), std::string::npos);
  cfg = config("nvfp4-pack-quantized", json::object());
  EXPECT_NE(err(cfg).find("config_groups must be a non-empty object"), std::string::npos);
  cfg = config("nvfp4-pack-quantized", {{"g", {{"targets", {"re:(unclosed"}}, {"weights", nvfp4_args()}}}});
  EXPECT_NE(err(cfg).find("'re:(unclosed' is not a regular expression"), std::string::npos) << err(cfg);
  cfg = config("nvfp4-pack-quantized", {{"g", {{"targets", {"Linear"}}, {"weights", nvfp4_args()}}}});
  cfg["quantization_config"]["sparsity_config"] = {{"format", "sparse-24-bitmask"}};
  EXPECT_NE(err(cfg).find("sparse"), std::string::npos);
  cfg = config("nvfp4-pack-quantized", {{"g", {{"targets", {"Linear"}}, {"weights", nvfp4_args()}}}});
  cfg["quantization_config"]["transform_config"] = {{"config_groups", {{"u", json::object()}}}};
  EXPECT_NE(err(cfg).find("transform"), std::string::npos);
  // Unsupported groups fail when a module uses them, naming both.
  json w = nvfp4_args();
  w["group_size"] = 32;
  auto q = parse(config("mxfp4-pack-quantized", {{"g", {{"targets", {"Linear"}}, {"weights", w}}}}));
  const std::string e = error_of([&] { q->module_scheme("model.layers.0.mlp.up_proj", kNone); });
  EXPECT_NE(e.find("config_groups['g']"), std::string::npos) << e;
  EXPECT_NE(e.find("group_size 32"), std::string::npos) << e;
  EXPECT_NE(e.find("(module model.layers.0.mlp.up_proj)"), std::string::npos) << e;
  // compressed-tensors with ModelOpt's hf_quant_config.json beside it: which is right?
  json hf = {{"quantization", {{"quant_algo", "NVFP4"}}}};
  json ok = config("nvfp4-pack-quantized", {{"g", {{"targets", {"Linear"}}, {"weights", nvfp4_args()}}}});
  EXPECT_NE(error_of([&] { parse_quant_config(hf, ok, "/c"); }).find("hf_quant_config.json"), std::string::npos);
}

}  // namespace
}  // namespace fp4lm::quant::compressed_tensors_config_test
