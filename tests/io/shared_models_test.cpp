// The real checkpoints in ../shared parse through Checkpoint with the expected tensors and bytes
// (values checked against the files' raw bytes).
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "common/paths.h"
#include "io/checkpoint.h"

namespace fp4lm::io::shared_models_test {
namespace {

std::map<DType, size_t> count_by_dtype(const Checkpoint& ck) {
  std::map<DType, size_t> m;
  for (const auto& n : ck.tensor_names()) ++m[ck.get(n).dtype];
  return m;
}

TEST(SharedModels, Stories260k) {
  FP4LM_REQUIRE_SHARED("models/stories260k");
  auto ck = Checkpoint::open((test::shared_dir() / "models/stories260k").string());
  EXPECT_EQ(ck->config()["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(ck->tensor_names().size(), 47u);
  EXPECT_EQ(count_by_dtype(*ck), (std::map<DType, size_t>{{DType::F32, 47}}));
  EXPECT_EQ(ck->total_tensor_bytes(), 1040128u);
  EXPECT_EQ(ck->get("model.embed_tokens.weight").shape, (Shape{512, 64}));
  EXPECT_EQ(ck->get("model.layers.4.mlp.down_proj.weight").shape, (Shape{64, 172}));
  EXPECT_EQ(ck->find("lm_head.weight"), nullptr);  // tied embeddings
  uint32_t bits;
  std::memcpy(&bits, ck->get("model.norm.weight").data, 4);
  EXPECT_EQ(bits, 0x401d54efu);
  EXPECT_EQ(ck->shards()[0]->metadata().at("format"), "pt");
}

TEST(SharedModels, TinyQwen3Moe) {
  FP4LM_REQUIRE_SHARED("models/tiny-qwen3-moe");
  auto ck = Checkpoint::open((test::shared_dir() / "models/tiny-qwen3-moe").string());
  EXPECT_EQ(ck->config()["architectures"][0], "Qwen3MoeForCausalLM");
  ASSERT_TRUE(ck->generation_config().has_value());
  EXPECT_FALSE(ck->hf_quant_config().has_value());
  EXPECT_EQ(ck->tensor_names().size(), 135u);
  EXPECT_EQ(count_by_dtype(*ck), (std::map<DType, size_t>{{DType::BF16, 135}}));
  EXPECT_EQ(ck->total_tensor_bytes(), 2239232u);
  EXPECT_EQ(ck->get("lm_head.weight").shape, (Shape{512, 128}));
  EXPECT_EQ(ck->get("model.layers.3.mlp.experts.7.down_proj.weight").shape, (Shape{128, 64}));
  uint16_t bits;
  std::memcpy(&bits, ck->get("model.norm.weight").data, 2);
  EXPECT_EQ(bits, 0x3fa1u);
}

}  // namespace
}  // namespace fp4lm::io::shared_models_test
