// Hostile config.json values (issue 11 point 6): every dimension has a stated maximum, floats a
// forward divides by or takes logarithms of must be finite and positive, and the dtype must be a
// float dtype. Each is refused at parse time with the file and field named, before anything
// sized by it is allocated.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "common/error_of.h"
#include "model/model_config.h"
#include "model/model_limits.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::model_limits_test {
namespace {

using nlohmann::json;
using test::error_of;

json dense_config() {
  synth::SyntheticOptions o;
  o.architecture = "LlamaForCausalLM";
  return synth::synthetic_config_json(o);
}

json moe_config() {
  synth::SyntheticOptions o;
  o.architecture = "Qwen2MoeForCausalLM";
  return synth::synthetic_config_json(o);
}

// The error for config `j` with `key` set to `value`, or "" when it parses.
std::string error_with(json j, const std::string& key, const json& value) {
  j[key] = value;
  return error_of([&] { parse_model_config(j, "/m/config.json"); });
}

#define EXPECT_HAS(hay, needle) EXPECT_NE((hay).find(needle), std::string::npos) << (hay)

TEST(ModelLimits, TheSyntheticConfigsParse) {
  EXPECT_EQ(error_of([] { parse_model_config(dense_config(), "c"); }), "");
  EXPECT_EQ(error_of([] { parse_model_config(moe_config(), "c"); }), "");
}

TEST(ModelLimits, EveryDimensionHasAStatedMaximum) {
  const int64_t huge = 1'000'000'000;
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
                          "intermediate_size", "max_position_embeddings"}) {
    SCOPED_TRACE(key);
    const std::string e = error_with(dense_config(), key, int64_t{1} << 40);
    EXPECT_HAS(e, "/m/config.json");
    EXPECT_HAS(e, std::string("'") + key + "'");
  }
  EXPECT_HAS(error_with(dense_config(), "num_hidden_layers", huge),
             "/m/config.json: field 'num_hidden_layers' is 1000000000, more than the supported maximum 1024");
  for (const char* key : {"num_experts", "moe_intermediate_size", "shared_expert_intermediate_size"}) {
    SCOPED_TRACE(key);
    EXPECT_HAS(error_with(moe_config(), key, huge), std::string("field '") + key + "' is 1000000000");
  }
  EXPECT_HAS(error_with(moe_config(), "decoder_sparse_step", huge), "'decoder_sparse_step'");
  // At the maximum itself the limit does not fire (the layers then fail on missing tensors).
  EXPECT_EQ(error_with(dense_config(), "num_hidden_layers", ModelLimits::num_hidden_layers), "");
}

TEST(ModelLimits, NonPositiveOrNonFiniteFloatsAreRefused) {
  for (const char* key : {"rms_norm_eps", "rope_theta"}) {
    SCOPED_TRACE(key);
    for (double v : {0.0, -1e-6, std::numeric_limits<double>::infinity()})
      EXPECT_HAS(error_with(dense_config(), key, v), std::string("field '") + key + "' must be a finite number > 0");
    EXPECT_HAS(error_with(dense_config(), key, std::nan("")), "must be a finite number > 0");
  }
  json j = dense_config();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 0.0}};
  EXPECT_HAS(error_of([&] { parse_model_config(j, "c"); }), "'rope_scaling.factor' must be a finite number > 0");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0}, {"high_freq_factor", 2.0},
                       {"original_max_position_embeddings", 8192}};
  EXPECT_HAS(error_of([&] { parse_model_config(j, "c"); }), "high_freq_factor (2) must not be less than low_freq_factor (4)");
}

TEST(ModelLimits, MaxPositionEmbeddingsMustBePositive) {
  // It used to surface as a bad --max-model-len flag (exit 2) with no flag given.
  for (int64_t v : {int64_t{0}, int64_t{-5}})
    EXPECT_HAS(error_with(dense_config(), "max_position_embeddings", v),
               "/m/config.json: field 'max_position_embeddings' must be positive");
}

TEST(ModelLimits, TorchDtypeMustBeAFloatDtype) {
  for (const char* ok : {"bfloat16", "float16", "float32"}) EXPECT_EQ(error_with(dense_config(), "torch_dtype", ok), "");
  EXPECT_HAS(error_with(dense_config(), "torch_dtype", "int8"),
             "/m/config.json: field 'torch_dtype' is 'int8', expected bfloat16, float16 or float32");
  json j = dense_config();
  j.erase("torch_dtype");
  j["dtype"] = "float8_e4m3fn";
  EXPECT_HAS(error_of([&] { parse_model_config(j, "c"); }), "'torch_dtype' is 'float8_e4m3fn'");
}

}  // namespace
}  // namespace fp4lm::model::model_limits_test
