// Replicas of gpt-oss-20b's and gpt-oss-120b's published layout (issue 24 item 3): config.json as
// OpenAI publishes it (https://huggingface.co/openai/gpt-oss-{20b,120b}/raw/main/config.json: its
// keys, layer_types, YaRN without truncation, sliding_window 128, swiglu_limit, the mxfp4
// quantization_config with its modules_to_not_convert, experts_per_token, ...) with the real
// layer counts, expert counts, top-k and attention heads, but hidden/intermediate 64 and a small
// vocabulary so the weights are tiny; the experts as MXFP4 `*_blocks` / `*_scales`. Each loads with
// MXFP4 experts on the W4A16 kernels and everything else unquantized, and generates greedily
// (decode steps equal to the batched forward).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "common/log_capture.h"
#include "common/paths.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "model/load/model_loader.h"
#include "reference/logits_check.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::gpt_oss_published_test {
namespace {

using nlohmann::json;

json published_config(int64_t layers, int64_t experts) {
  json types = json::array();
  for (int64_t i = 0; i < layers; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  return {{"architectures", {"GptOssForCausalLM"}},
          {"attention_bias", true},
          {"attention_dropout", 0.0},
          {"eos_token_id", 200002},
          {"experts_per_token", 4},
          {"head_dim", 64},
          {"hidden_act", "silu"},
          {"hidden_size", 2880},
          {"initial_context_length", 4096},
          {"initializer_range", 0.02},
          {"intermediate_size", 2880},
          {"layer_types", types},
          {"max_position_embeddings", 131072},
          {"model_type", "gpt_oss"},
          {"num_attention_heads", 64},
          {"num_experts_per_tok", 4},
          {"num_hidden_layers", layers},
          {"num_key_value_heads", 8},
          {"num_local_experts", experts},
          {"output_router_logits", false},
          {"pad_token_id", 199999},
          {"quantization_config",
           {{"modules_to_not_convert",
             {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
            {"quant_method", "mxfp4"}}},
          {"rms_norm_eps", 1e-05},
          {"rope_scaling",
           {{"beta_fast", 32.0}, {"beta_slow", 1.0}, {"factor", 32.0}, {"original_max_position_embeddings", 4096},
            {"rope_type", "yarn"}, {"truncate", false}}},
          {"rope_theta", 150000},
          {"router_aux_loss_coef", 0.9},
          {"sliding_window", 128},
          {"swiglu_limit", 7.0},
          {"tie_word_embeddings", false},
          {"transformers_version", "4.55.0.dev0"},
          {"use_cache", true},
          {"vocab_size", 201088}};
}

struct Replica {
  const char* name;
  int64_t layers, experts;
};

TEST(GptOssPublished, ReplicasLoadWithMxfp4ExpertsAndGenerate) {
  for (const Replica r : {Replica{"gpt-oss-20b", 24, 32}, Replica{"gpt-oss-120b", 36, 128}}) {
    SCOPED_TRACE(r.name);
    test::TempDir dir;
    constexpr int64_t kSmall = 64, kVocab = 300;
    synth::SyntheticOptions s;
    s.architecture = "GptOssForCausalLM";
    s.algo = quant::QuantAlgo::None;
    s.mxfp4_experts = true;
    s.layers = r.layers;
    s.experts = r.experts;
    s.top_k = 4;
    s.hidden = kSmall;
    s.moe_intermediate = kSmall;
    s.heads = 64;
    s.kv_heads = 8;
    s.head_dim = 64;
    s.vocab = kVocab;
    s.seed = 3;
    synth::write_synthetic_checkpoint(dir.path().string(), s);
    json cfg = published_config(r.layers, r.experts);
    cfg["hidden_size"] = kSmall;
    cfg["intermediate_size"] = kSmall;
    cfg["vocab_size"] = kVocab;
    cfg["eos_token_id"] = 2;
    cfg["pad_token_id"] = 1;
    std::ofstream(dir.path() / "config.json") << cfg.dump(2);

    EngineOptions o;
    o.dtype = "bfloat16";
    {
      ModelLoader l(io::Checkpoint::open(dir.path().string()), o);
      EXPECT_EQ(l.config().attention[0].sliding_window(), 128);
      EXPECT_EQ(l.config().rope_scaling.type, "yarn");
      EXPECT_FALSE(l.config().rope_scaling.truncate);
      EXPECT_EQ(l.config().moe.top_k, 4);
      for (const LayerSpec& spec : l.layers())
        EXPECT_EQ(l.describe(spec).scheme.key,
                  spec.kind == kernels::LayerKind::moe ? kernels::kMxfp4W4A16 : kernels::kUnquantized)
            << spec.name;
    }
    std::string log;
    std::unique_ptr<CausalLM> lm;
    {
      test::LogCapture cap(spdlog::level::info);
      lm = CausalLM::load(dir.path().string(), o);
      log = cap.text();
    }
    EXPECT_NE(log.find("Detected MXFP4 checkpoint"), std::string::npos) << log;
    EXPECT_NE(log.find("MXFP4 MoE backend out of potential backends"), std::string::npos) << log;

    // Greedy generation, token by token, from a prompt; each step's logits equal the batched
    // forward's over the same tokens (bf16 activations: to rounding).
    std::vector<int32_t> toks = {5, 17, 42, 99, 7};
    SequenceState st = lm->new_sequence();
    std::vector<float> logits(static_cast<size_t>(toks.size()) * kVocab);
    lm->forward(st, toks.data(), static_cast<int64_t>(toks.size()), LogitsMode::last, logits.data());
    for (int step = 0; step < 6; ++step) {
      const float* last = logits.data();
      for (int64_t v = 0; v < kVocab; ++v) ASSERT_TRUE(std::isfinite(last[v]));
      const int32_t next = static_cast<int32_t>(std::max_element(last, last + kVocab) - last);
      toks.push_back(next);
      lm->forward(st, &toks.back(), 1, LogitsMode::last, logits.data());
    }
    const std::vector<float> batch = all_logits(*lm, toks);
    double diff = 0, scale = 0;
    for (int64_t v = 0; v < kVocab; ++v) {
      diff = std::max(diff, std::fabs(static_cast<double>(logits[v]) - batch[(toks.size() - 1) * kVocab + v]));
      scale = std::max(scale, std::fabs(static_cast<double>(batch[(toks.size() - 1) * kVocab + v])));
    }
    EXPECT_LT(diff, 0.05 * scale);
  }
}

}  // namespace
}  // namespace fp4lm::model::gpt_oss_published_test
