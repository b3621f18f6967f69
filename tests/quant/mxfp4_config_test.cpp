// MXFP4 configs (quant_method "mxfp4", docs/FORMAT.md §11) as OpenAI publishes gpt-oss: only the
// experts' fused parameters are MXFP4; modules_to_not_convert globs cover the modules below them;
// the tensors decide when they are consulted; malformed configs and a second config file are errors.
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "quant/mxfp4_config.h"

namespace fp4lm::quant::mxfp4_config_test {
namespace {

using nlohmann::json;

const json kPublished = {{"quant_method", "mxfp4"},
                         {"modules_to_not_convert",
                          {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};

TEST(Mxfp4Config, PublishedShapeParses) {
  auto c = parse_quant_config(std::nullopt, {{"quantization_config", kPublished}}, "/m");
  EXPECT_EQ(c->family(), Family::mxfp4);
  EXPECT_EQ(family_name(c->family()), "mxfp4");
  EXPECT_EQ(scheme_name(Scheme::mxfp4), "MXFP4");
  EXPECT_TRUE(c->quantized());
  EXPECT_TRUE(c->declares(Scheme::mxfp4));
  EXPECT_FALSE(c->declares(Scheme::nvfp4));
  EXPECT_FALSE(c->exclusions_decide());
  EXPECT_NE(c->describe().find("MXFP4 checkpoint"), std::string::npos) << c->describe();
  // Upper case is the same method.
  EXPECT_EQ(parse_quant_config(std::nullopt, {{"quantization_config", {{"quant_method", "MXFP4"}}}}, "/m")->family(),
            Family::mxfp4);
}

TEST(Mxfp4Config, ExclusionsAndWhatTheTensorsSay) {
  const Mxfp4Config c = parse_mxfp4_config(kPublished, "/m");
  EXPECT_TRUE(c.excluded("model.layers.12.self_attn.q_proj"));
  EXPECT_TRUE(c.excluded("model.layers.0.mlp.router"));
  EXPECT_TRUE(c.excluded("lm_head"));
  EXPECT_FALSE(c.excluded("model.layers.0.mlp.experts.gate_up_proj"));
  EXPECT_FALSE(c.excluded("lm_head_extra"));  // an entry covers the module and those below it only
  // Without tensors: the experts' parameters are MXFP4, everything else unquantized.
  EXPECT_EQ(c.module_scheme("model.layers.0.mlp.experts.gate_up_proj", {}), Scheme::mxfp4);
  EXPECT_EQ(c.module_scheme("model.layers.0.mlp.experts.down_proj", {}), Scheme::mxfp4);
  EXPECT_EQ(c.module_scheme("model.layers.0.self_attn.o_proj", {}), Scheme::unquantized);
  EXPECT_EQ(c.module_scheme("model.layers.0.mlp.router", {}), Scheme::unquantized);
  // With tensors: whatever they hold.
  ModuleTensors t;
  t.dtype = [](const std::string&) { return std::optional<DType>(DType::BF16); };
  t.scheme = [](const std::string& m) { return m.ends_with("down_proj") ? Scheme::mxfp4 : Scheme::unquantized; };
  EXPECT_EQ(c.module_scheme("model.layers.0.mlp.experts.gate_up_proj", t), Scheme::unquantized);
  EXPECT_EQ(c.module_scheme("model.layers.0.mlp.experts.down_proj", t), Scheme::mxfp4);
}

TEST(Mxfp4Config, ErrorsNameTheField) {
  EXPECT_NE(test::error_of([] {
              parse_quant_config(std::nullopt, {{"quantization_config", {{"quant_method", "mxfp4"},
                                                                        {"modules_to_not_convert", "lm_head"}}}},
                                 "/m");
            }).find("modules_to_not_convert must be a list"),
            std::string::npos);
  EXPECT_NE(test::error_of([] {
              parse_quant_config(json::object(), {{"quantization_config", kPublished}}, "/m");
            }).find("hf_quant_config.json"),
            std::string::npos);
}

}  // namespace
}  // namespace fp4lm::quant::mxfp4_config_test
