// The stage split (balanced by the bytes read per token, contiguous, every stage non-empty), the
// files' fingerprint each rank compares with rank 0's, and the message encoding's bounds checks.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "common/checkpoint_edit.h"
#include "common/paths.h"
#include "core/error.h"
#include "dist/stage_plan.h"
#include "dist/wire.h"
#include "io/checkpoint.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::dist::stage_plan_test {
namespace {

TEST(StagePlan, SplitsMinimizeTheLargestStage) {
  // Layers of 10 bytes, lm_head 25: two stages put the head with fewer layers.
  LayerBytes b{{10, 10, 10, 10, 10, 10}, 25};
  std::vector<Stage> s = plan_stages(b, 2);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].first, 0);
  EXPECT_EQ(s[0].end, 4);
  EXPECT_EQ(s[0].bytes, 40u);
  EXPECT_EQ(s[1].first, 4);
  EXPECT_EQ(s[1].end, 6);
  EXPECT_EQ(s[1].bytes, 45u);
  // A heavy layer in the middle stands alone.
  s = plan_stages({{5, 5, 100, 5, 5}, 0}, 3);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].first, 2);
  EXPECT_EQ(s[1].end, 3);
  EXPECT_EQ(s[0].bytes + s[1].bytes + s[2].bytes, 120u);
  // One stage: everything.
  s = plan_stages(b, 1);
  EXPECT_EQ(s[0].end, 6);
  EXPECT_EQ(s[0].bytes, 85u);
  // As many stages as layers: one each.
  s = plan_stages(b, 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(s[static_cast<size_t>(i)].end - s[static_cast<size_t>(i)].first, 1);
  EXPECT_THROW(plan_stages(b, 7), UsageError);
  EXPECT_THROW(plan_stages(b, 0), UsageError);
}

TEST(StagePlan, LayerBytesAndFingerprintsFromTheHeaders) {
  test::TempDir dir;
  synth::SyntheticOptions so;
  so.architecture = "LlamaForCausalLM";
  so.layers = 3;
  synth::write_synthetic_checkpoint(dir.path().string(), so);
  auto ckpt = io::Checkpoint::open(dir.path().string());
  const LayerBytes b = layer_bytes(*ckpt);
  ASSERT_EQ(b.layer.size(), 3u);
  uint64_t total = b.head;
  for (uint64_t v : b.layer) {
    EXPECT_GT(v, 0u);
    total += v;
  }
  // Every tensor but the embedding and the final norm is some stage's cost.
  const uint64_t rest = ckpt->get("model.embed_tokens.weight").nbytes + ckpt->get("model.norm.weight").nbytes;
  EXPECT_EQ(total + rest, ckpt->total_tensor_bytes());
  EXPECT_EQ(b.head, ckpt->get("lm_head.weight").nbytes);

  const StageFingerprint f0 = fingerprint(*ckpt, {0, 1, 0}, 3), f1 = fingerprint(*ckpt, {1, 3, 0}, 3);
  EXPECT_EQ(f0.config, f1.config);
  ASSERT_EQ(f0.files.count("model.safetensors"), 1u);
  EXPECT_NE(f0.files.at("model.safetensors"), f1.files.at("model.safetensors"));
  EXPECT_EQ(f1.files.at("model.safetensors"), fingerprint(*ckpt, {1, 3, 0}, 3).files.at("model.safetensors"));

  // Another lm_head dtype changes the last stage's fingerprint, not the first's; another
  // config.json changes both.
  test::TempDir other;
  so.quantize_lm_head = true;
  synth::write_synthetic_checkpoint(other.path().string(), so);
  auto ck2 = io::Checkpoint::open(other.path().string());
  EXPECT_EQ(fingerprint(*ck2, {0, 1, 0}, 3).files, f0.files);
  EXPECT_NE(fingerprint(*ck2, {1, 3, 0}, 3).files, f1.files);
  test::TempDir third;
  test::copy_dir(dir.path(), third.path());
  nlohmann::json cfg = ckpt->config();
  cfg["rope_theta"] = 12345.0;
  std::ofstream(third.path() / "config.json") << cfg.dump();
  EXPECT_NE(fingerprint(*io::Checkpoint::open(third.path().string()), {0, 1, 0}, 3).config, f0.config);
}

// An MoE layer weighs what a token reads of it: its attention / router / shared expert whole,
// its routed experts top_k / num_experts of their bytes; a dense layer all it holds. The split
// follows: here by the bytes held it would cut after the two MoE layers, by the bytes read after
// three layers (the two MoE layers read little; the last stage carries the bf16 lm_head).
TEST(StagePlan, MoeLayersWeighTheBytesATokenReads) {
  test::TempDir dir;
  synth::SyntheticOptions so;
  so.architecture = "NemotronHForCausalLM";
  so.hybrid_pattern = "EE--";  // two MoE layers, then two dense (relu² MLP) layers
  so.layers = 4;
  so.experts = 8;
  so.top_k = 1;
  synth::write_synthetic_checkpoint(dir.path().string(), so);
  auto ckpt = io::Checkpoint::open(dir.path().string());
  const LayerBytes b = layer_bytes(*ckpt);
  ASSERT_EQ(b.layer.size(), 4u);
  std::vector<uint64_t> held(4, 0), experts(4, 0);
  for (const std::string& name : ckpt->tensor_names()) {
    for (size_t l = 0; l < 4; ++l) {
      if (name.rfind("backbone.layers." + std::to_string(l) + ".", 0) != 0) continue;
      held[l] += ckpt->get(name).nbytes;
      if (name.find(".mixer.experts.") != std::string::npos) experts[l] += ckpt->get(name).nbytes;
    }
  }
  for (size_t l = 0; l < 2; ++l) {
    ASSERT_GT(experts[l], 0u) << "layer " << l;
    EXPECT_EQ(b.layer[l], held[l] - experts[l] + experts[l] / 8) << "layer " << l;  // 1 of 8 experts read
  }
  for (size_t l = 2; l < 4; ++l) {
    EXPECT_EQ(experts[l], 0u);
    EXPECT_EQ(b.layer[l], held[l]) << "layer " << l;
  }
  const std::vector<Stage> by_read = plan_stages(b, 2), by_held = plan_stages({held, b.head}, 2);
  EXPECT_EQ(by_held[0].end, 2);  // the old rule's split
  EXPECT_EQ(by_read[0].end, 3);
  EXPECT_EQ(by_read[0].bytes, b.layer[0] + b.layer[1] + b.layer[2]);
  EXPECT_EQ(by_read[1].bytes, b.layer[3] + b.head);
}

TEST(Wire, RoundTripsAndRefusesTruncatedMessages) {
  WireWriter w;
  const std::vector<float> h = {1.5f, -0.0f, 3e-38f};
  w.put<uint8_t>(7).put<int64_t>(-42).put_array(std::span<const float>(h)).put_string("stage 2 failed");
  WireReader r(w.bytes());
  EXPECT_EQ(r.get<uint8_t>(), 7);
  EXPECT_EQ(r.get<int64_t>(), -42);
  std::vector<float> back(3);
  r.get_into(back.data(), 3);
  EXPECT_EQ(0, std::memcmp(back.data(), h.data(), sizeof(float) * 3));
  EXPECT_EQ(r.get_string(), "stage 2 failed");
  EXPECT_TRUE(r.done());
  EXPECT_THROW(r.get<uint8_t>(), Error);
  // A length prefix larger than the message, and a count that does not match.
  std::vector<uint8_t> cut(w.bytes().begin(), w.bytes().begin() + 12);
  WireReader c(cut);
  c.get<uint8_t>();
  c.get<int64_t>();
  EXPECT_THROW(c.get_array<float>(), Error);
  WireReader d(w.bytes());
  d.get<uint8_t>();
  d.get<int64_t>();
  std::vector<float> two(2);
  EXPECT_THROW(d.get_into(two.data(), 2), Error);
}

}  // namespace
}  // namespace fp4lm::dist::stage_plan_test
