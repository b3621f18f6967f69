// Gemma 4 MoE (the 26B-A4B: enable_moe_block) against the float64 forward of
// tests/reference/gemma_reference.h: in every layer the dense MLP and the MoE block side by side —
// the router on the residual stream (weightless RMSNorm × router.scale / sqrt(hidden), softmax,
// top-k renormalized, × per_expert_scale), GELU-tanh experts behind pre_feedforward_layernorm_2,
// post_feedforward_layernorm_1 / _2 on the two branches before the layer's post-FFN norm — with
// the experts per expert (NVIDIA's export) and fused 3-D (transformers' / Google's layout); decode
// token by token, chunked prefill, batches; bfloat16; config errors naming their field; and a
// replica of NVIDIA's Gemma-4-26B-A4B-NVFP4 (the published config's keys with small dimensions,
// MLPs and experts NVFP4, attention and routers BF16, vision tensors present) as stored and under
// --override-activation-dtype bfloat16.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/error_of.h"
#include "common/log_capture.h"
#include "common/paths.h"
#include "model/causal_lm.h"
#include "reference/gemma_reference.h"
#include "model/load/model_loader.h"

namespace fp4lm::model::gemma4_moe_test {
namespace {

using namespace gemma_ref;
using test::TempDir;

TEST(Gemma4Moe, Float32MatchesTheFloat64ReferenceInBothExpertLayouts) {
  Gemma m = make_gemma4_moe();
  const auto want = reference(m, kTokens);
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused 3-D experts, VL" : "per-expert, flat");
    TempDir dir;
    write_gemma(m, dir.path(), /*vl=*/fused, fused);
    auto lm = CausalLM::load(dir.path().string(), f32());
    const double d = max_rel_diff(all_logits(*lm, kTokens), want);
    EXPECT_LT(d, 2e-5);
    RecordProperty(fused ? "fused_max_rel_diff" : "per_expert_max_rel_diff", fmt::format("{:.2e}", d));
    ModelLoader l(io::Checkpoint::open(dir.path().string()), f32());
    const LayerSpec& experts = l.layer("model.layers.1.experts");
    EXPECT_EQ(experts.expert_activation.gate, kernels::ExpertActivation::Gate::gelu_tanh);
    EXPECT_TRUE(l.layer("model.layers.1.router.proj").router);
  }
  // The MoE branch matters: the same model without it is far from the reference.
  Gemma dense = m;
  dense.moe = false;
  EXPECT_GT(max_rel_diff([&] {
              std::vector<float> flat;
              for (const auto& row : reference(dense, kTokens)) flat.insert(flat.end(), row.begin(), row.end());
              return flat;
            }(),
                         want),
            1e-2);
}

TEST(Gemma4Moe, TokenByTokenChunkedAndBatchedEqualOneForward) {
  TempDir dir;
  write_gemma(make_gemma4_moe(15), dir.path());
  expect_steps_chunks_and_batches_match_one_forward(dir.path().string(), f32(), kTokens);
}

// bf16 moves the hidden states by a few percent. Two things turn that into a jump at single
// positions: softmax scale 1 on RMS-normalized q/k (head_dim 16 / 32) makes attention nearly
// one-hot, so rounding can change which key wins, and a router's top-k choice can flip (as in
// tests/model/qwen3_5_moe_test.cpp). With every expert chosen only the first remains: all but at
// most 3 of the 13 positions within 0.1 (measured on AVX-512: 2 beyond, 0.37 and 0.23; with top-2,
// 3 beyond). A wrong bf16 path would move every position.
TEST(Gemma4Moe, Bfloat16ActivationsStayCloseToTheReference) {
  expect_bf16_load_close_to_reference(make_gemma4_moe(7, /*experts=*/4, /*top_k=*/4), /*flips=*/3);
}

TEST(Gemma4Moe, BadConfigsAndMissingTensorsAreErrorsNamingThem) {
  auto load_error = [](const Gemma& m) {
    TempDir dir;
    write_gemma(m, dir.path());
    return test::error_of([&] { CausalLM::load(dir.path().string(), f32()); });
  };
  for (const char* key : {"num_experts", "top_k_experts", "moe_intermediate_size"}) {
    Gemma m = make_gemma4_moe();
    m.config.erase(key);
    const std::string e = load_error(m);
    EXPECT_NE(e.find(std::string("missing required field '") + key + "'"), std::string::npos) << e;
  }
  Gemma m = make_gemma4_moe();
  m.config["top_k_experts"] = 7;
  EXPECT_NE(load_error(m).find("top_k_experts = 7 must be in [1, num_experts = 6]"), std::string::npos);
  for (const char* t : {"model.layers.2.router.per_expert_scale", "model.layers.0.pre_feedforward_layernorm_2.weight",
                        "model.layers.3.experts.5.up_proj.weight"}) {
    Gemma bad = make_gemma4_moe();
    bad.w.erase(t);
    const std::string e = load_error(bad);
    EXPECT_NE(e.find(std::string(t).substr(0, std::string(t).rfind('.'))), std::string::npos) << t << ": " << e;
  }
}

// The 26B-A4B's layer pattern (five sliding layers with its window of 1024, then a full one) in
// small dimensions, one 16K-token sequence (16 windows) prefilled: each sliding layer holds
// window - 1 + prefill_chunk rows (a ring) whatever the length, the full layer every position.
// The bytes the sequence reserves and has filled are that arithmetic. (16K, not 32K: the full
// layer's attention is quadratic, and the claim is the same past the first window.)
TEST(Gemma4MoeKv, ALongSequenceKeepsOnlyTheWindowInSlidingLayers) {
  constexpr int64_t kLen = 16384, kWindow = 1024, kChunk = 256;
  Gemma m = make_gemma4_moe(31, /*experts=*/4, /*top_k=*/2, /*moe_inter=*/16, [](Gemma& g) {
    g.layers = 6;
    g.sliding = {true, true, true, true, true, false};
    g.window = kWindow;
    g.hidden = 16;
    g.inter = 16;
    g.heads = 1;  // one head of 8 everywhere: the full layer's 32K x 32K attention stays cheap
    g.kvh = 1;
    g.hd = 8;
    g.full_kvh = 1;
    g.full_hd = 8;
  });
  m.config["max_position_embeddings"] = kLen;
  TempDir dir;
  write_gemma(m, dir.path());
  LoadOptions lo;
  lo.max_model_len = kLen;
  lo.prefill_chunk = kChunk;
  auto lm = CausalLM::load(dir.path().string(), f32(), lo);
  std::vector<int32_t> toks(static_cast<size_t>(kLen));
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 7 + 3) % static_cast<size_t>(m.vocab));
  SequenceState s = lm->new_sequence();
  std::vector<float> last(static_cast<size_t>(lm->vocab_size()));
  lm->forward(s, toks.data(), kLen, LogitsMode::last, last.data());
  for (float v : last) ASSERT_TRUE(std::isfinite(v));
  const size_t full = static_cast<size_t>(kLen) * 2 * 1 * 8 * sizeof(float);
  const size_t sliding = 5 * static_cast<size_t>(kWindow - 1 + kChunk) * 2 * 1 * 8 * sizeof(float);
  EXPECT_EQ(s.used_bytes(), full + sliding);
  EXPECT_EQ(s.reserved_bytes(), full + sliding);
  EXPECT_EQ(lm->sequence_bytes(kLen), full + sliding);
  RecordProperty("kv_bytes", std::to_string(s.used_bytes()));
}

// The 26B-A4B's own KV geometry (30 layers, 5:1; sliding: 8 KV heads × 256, window 1024; full:
// 2 KV heads × 512, keys and values both cached) with small everything else, bfloat16 KV: the
// bytes one 32K-token sequence reserves, the figure docs/BENCHMARKS.md states.
TEST(Gemma4MoeKv, TheTwentySixBA4BsKvBytesAt32KTokensFollowTheWindowArithmetic) {
  constexpr int64_t kLen = 32768, kWindow = 1024, kChunk = 256;
  Gemma m = make_gemma4_moe(32, /*experts=*/2, /*top_k=*/1, /*moe_inter=*/16, [](Gemma& g) {
    g.layers = 30;
    g.sliding.assign(30, true);
    for (size_t i = 5; i < 30; i += 6) g.sliding[i] = false;
    g.window = kWindow;
    g.hidden = 16;
    g.inter = 16;
    g.heads = 8;
    g.kvh = 8;
    g.hd = 256;
    g.full_kvh = 2;
    g.full_hd = 512;
  });
  m.config["max_position_embeddings"] = 262144;
  TempDir dir;
  write_gemma(m, dir.path());
  LoadOptions lo;
  lo.max_model_len = kLen;
  lo.prefill_chunk = kChunk;
  EngineOptions o;
  o.dtype = "bfloat16";
  auto lm = CausalLM::load(dir.path().string(), o, lo);
  const size_t full = 5 * static_cast<size_t>(kLen) * 2 * 2 * 512 * 2;
  const size_t sliding = 25 * static_cast<size_t>(kWindow - 1 + kChunk) * 2 * 8 * 256 * 2;
  EXPECT_EQ(full, 671088640u);     // 640 MiB
  EXPECT_EQ(sliding, 261939200u);  // 249.8 MiB, instead of 6.25 GiB for 32K positions
  EXPECT_EQ(lm->sequence_bytes(kLen), full + sliding);
  RecordProperty("kv_bytes_32k", std::to_string(lm->sequence_bytes(kLen)));
}

// NVIDIA's Gemma-4-26B-A4B-NVFP4 in small: config.json with the keys of the published
// Gemma4Config (the 26B-A4B's values where they are not dimensions: k_eq_v full layers with their
// own global_head_dim and num_global_key_value_heads, use_bidirectional_attention "vision",
// soft-capping, tied embeddings, no audio tower), hf_quant_config.json as ModelOpt writes it: the
// language model's MLPs and experts NVFP4 (W4A4), attention, routers, embeddings and lm_head
// excluded; experts stored per expert (experts.<e>.{gate,up,down}_proj); vision tensors present.
void write_26b_a4b_layout(const Gemma& m, const std::filesystem::path& dir) {
  write_gemma(m, dir, /*vl=*/true);
  json c = json::parse(std::ifstream(dir / "config.json"));
  json& t = c["text_config"];
  t["attention_bias"] = false;
  t["attention_dropout"] = 0.0;
  t["initializer_range"] = 0.02;
  t["max_position_embeddings"] = 262144;
  t["pad_token_id"] = 0;
  t["use_bidirectional_attention"] = "vision";
  t["use_cache"] = true;
  t["vocab_size_per_layer_input"] = 262144;
  t["dtype"] = "bfloat16";
  c["audio_config"] = nullptr;
  c["boi_token_id"] = 255999;
  c["eoi_token_id"] = 258882;
  c["image_token_id"] = 258880;
  c["video_token_id"] = 258884;
  c["initializer_range"] = 0.02;
  c["tie_word_embeddings"] = true;
  c["transformers_version"] = "5.5.0.dev0";
  c["dtype"] = "bfloat16";
  std::ofstream(dir / "config.json") << c.dump(2);
  json excl = {"lm_head", "model.vision_tower*", "model.embed_vision*"};
  for (int64_t l = 0; l < m.layers; ++l) {
    excl.push_back(fmt::format("model.language_model.layers.{}.self_attn*", l));
    excl.push_back(fmt::format("model.language_model.layers.{}.router*", l));
  }
  std::ofstream(dir / "hf_quant_config.json")
      << json{{"producer", {{"name", "modelopt"}, {"version", "0.43.0"}}},
              {"quantization",
               {{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16},
                {"exclude_modules", excl}}}}
             .dump(2);
}

TEST(Gemma4Published, Nvfp4MlpsAndExpertsAs26BA4BRunAsStoredAndUnderTheOverride) {
  Gemma m = make_gemma4_moe(23);
  quantize_mlps(m, /*input_scale=*/6.0f / 2688, /*down_scale=*/2.0f / 2688);
  TempDir dir;
  write_26b_a4b_layout(m, dir.path());
  for (bool override_a16 : {false, true}) {
    SCOPED_TRACE(override_a16 ? "override" : "as stored");
    EngineOptions o = f32();
    if (override_a16) o.override_activation_dtype = DType::BF16;
    std::string log;
    const std::unique_ptr<CausalLM> lm = load_logged(dir.path().string(), o, log);
    EXPECT_NE(log.find("Detected ModelOpt NVFP4 checkpoint"), std::string::npos) << log;
    EXPECT_NE(log.find("NVFP4 MoE backend out of potential backends"), std::string::npos) << log;
    EXPECT_EQ(log.find("NVFP4 W4A16 override active") != std::string::npos, override_a16) << log;
    EXPECT_NE(log.find("the audio tower and its embedder are skipped"), std::string::npos) << log;
    {
      ModelLoader l(io::Checkpoint::open(dir.path().string()), o);
      for (const LayerSpec& s : l.layers()) {
        const bool quantized = s.name.find(".mlp.") != std::string::npos || s.name.ends_with(".experts");
        EXPECT_EQ(l.describe(s).scheme.key, !quantized ? kernels::kUnquantized
                                            : override_a16 ? kernels::kNvfp4W4A16
                                                           : kernels::kNvfp4W4A4)
            << s.name;
      }
    }
    expect_replica_matches_reference(*lm, m, override_a16);
  }
}

}  // namespace
}  // namespace fp4lm::model::gemma4_moe_test
