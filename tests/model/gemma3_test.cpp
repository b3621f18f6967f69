// Gemma 3's text model (Gemma3ForCausalLM, and Gemma3ForConditionalGeneration's language model)
// against the float64 forward of tests/reference/gemma_reference.h: sliding and full layers with
// their own RoPE, a sequence three times the window, query_pre_attn_scalar ≠ head_dim, the four
// (1 + w) norms, scaled embeddings, GeGLU, tied or separate lm_head, soft-capping; decode token
// by token, prefill in chunks, batches; the KV bytes the window predicts; config errors; and a
// replica of NVIDIA's gemma-3-12b-it-NVFP4 layout (NVFP4 MLPs, attention and everything else
// BF16, VL nesting, vision tensors present) that loads, generates, and runs as stored and under
// --override-activation-dtype bfloat16.
#include <gtest/gtest.h>

#include <fstream>

#include "common/log_capture.h"
#include "common/paths.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "reference/gemma_reference.h"
#include "model/load/model_loader.h"

namespace fp4lm::model::gemma3_test {
namespace {

using namespace gemma_ref;
using test::TempDir;

std::unique_ptr<CausalLM> load(const Gemma& m, const TempDir& dir, bool vl = false, EngineOptions o = f32(),
                               LoadOptions lo = {}) {
  write_gemma(m, dir.path(), vl);
  return CausalLM::load(dir.path().string(), o, lo);
}

TEST(Gemma3, Float32MatchesTheFloat64ReferenceFlatAndVl) {
  Gemma m = make_gemma3();
  const auto want = reference(m, kTokens);
  for (bool vl : {false, true}) {
    TempDir dir;
    std::string log;
    std::unique_ptr<CausalLM> lm;
    {
      test::LogCapture cap(spdlog::level::info);
      lm = load(m, dir, vl);
      log = cap.text();
    }
    EXPECT_EQ(lm->config().architecture, vl ? "Gemma3ForConditionalGeneration" : "Gemma3ForCausalLM");
    EXPECT_EQ(log.find("vision tower") != std::string::npos, vl) << log;
    const double d = max_rel_diff(all_logits(*lm, kTokens), want);
    EXPECT_LT(d, 2e-5) << (vl ? "VL" : "flat");
    RecordProperty(vl ? "vl_max_rel_diff" : "flat_max_rel_diff", fmt::format("{:.2e}", d));
  }
}

TEST(Gemma3, SeparateLmHeadAndSoftCappingMatchTheReference) {
  Gemma m = make_gemma3(9);
  untie(m);
  m.softcap = 1.5;  // below the logits' range, so the cap bends them
  m.config["final_logit_softcapping"] = m.softcap;
  TempDir dir;
  auto lm = load(m, dir);
  const auto got = all_logits(*lm, kTokens);
  EXPECT_LT(max_rel_diff(got, reference(m, kTokens)), 2e-5);
  for (float v : got) EXPECT_LT(std::abs(v), 1.5f);
}

TEST(Gemma3, TokenByTokenChunkedAndBatchedEqualOneForward) {
  TempDir dir;
  write_gemma(make_gemma3(13), dir.path());
  // The sliding layers' rings wrap three times.
  expect_steps_chunks_and_batches_match_one_forward(dir.path().string(), f32(), kTokens);
}

TEST(Gemma3, Bfloat16ActivationsStayCloseToTheReference) {
  Gemma m = make_gemma3();
  TempDir dir;
  EngineOptions o;
  o.dtype = "bfloat16";
  auto lm = load(m, dir, false, o);
  EXPECT_EQ(lm->dtype(), DType::BF16);
  const double d = max_rel_diff(all_logits(*lm, kTokens), reference(m, kTokens));
  EXPECT_LT(d, 3e-2);
  RecordProperty("bf16_max_rel_diff", fmt::format("{:.2e}", d));
}

// Sliding layers keep window - 1 + prefill_chunk rows whatever the capacity; full layers grow.
TEST(Gemma3, KvBytesFollowTheWindowArithmetic) {
  Gemma m = make_gemma3();
  TempDir dir;
  LoadOptions lo;
  lo.prefill_chunk = 8;
  auto lm = load(m, dir, false, f32(), lo);
  const size_t row = 2 * m.kvh * m.hd * sizeof(float);  // K and V of one position
  for (int64_t cap : {16, 256}) {
    const size_t want = 2 * static_cast<size_t>(cap) * row + 2 * static_cast<size_t>(m.window - 1 + 8) * row;
    EXPECT_EQ(lm->sequence_bytes(cap), want) << cap;
  }
}

void expect_load_error(Gemma m, const char* what, bool vl = false) {
  TempDir dir;
  try {
    load(m, dir, vl);
    FAIL() << "expected an error naming " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Gemma3, ConfigErrorsNameTheField) {
  Gemma m = make_gemma3();
  m.config["layer_types"].erase(0);
  expect_load_error(m, "'layer_types'");
  m = make_gemma3();
  m.config["layer_types"][1] = "linear_attention";
  expect_load_error(m, "\"linear_attention\"");
  m = make_gemma3();
  m.config["attn_logit_softcapping"] = 50.0;
  expect_load_error(m, "attn_logit_softcapping", true);
  m = make_gemma3();
  m.config["hidden_activation"] = "gelu";
  expect_load_error(m, "hidden_activation 'gelu'");
  m = make_gemma3();
  m.config["rope_parameters"]["full_attention"]["rope_type"] = "yarn";
  expect_load_error(m, "rope_parameters.full_attention.rope_type 'yarn'");
  m = make_gemma3();
  m.config["query_pre_attn_scalar"] = 0;
  expect_load_error(m, "query_pre_attn_scalar");
  m = make_gemma3();
  m.config["use_bidirectional_attention"] = true;
  expect_load_error(m, "use_bidirectional_attention");
}

// google/gemma-3-12b-it's config.json as published: text_config names only what differs from
// Gemma3TextConfig's defaults (no vocab_size, head_dim, rope_theta, ...), rope_scaling in the
// older form; transformers' defaults fill the rest.
TEST(Gemma3, PublishedTwelveBConfigGetsTransformersDefaults) {
  const json config = {
      {"architectures", {"Gemma3ForConditionalGeneration"}},
      {"boi_token_index", 255999},
      {"eoi_token_index", 256000},
      {"eos_token_id", {1, 106}},
      {"image_token_index", 262144},
      {"mm_tokens_per_image", 256},
      {"model_type", "gemma3"},
      {"text_config",
       {{"hidden_size", 3840},
        {"intermediate_size", 15360},
        {"model_type", "gemma3_text"},
        {"num_attention_heads", 16},
        {"num_hidden_layers", 48},
        {"num_key_value_heads", 8},
        {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
        {"sliding_window", 1024}}},
      {"torch_dtype", "bfloat16"},
      {"vision_config",
       {{"hidden_size", 1152}, {"image_size", 896}, {"model_type", "siglip_vision_model"}, {"num_hidden_layers", 27}}}};
  const ModelConfig c = parse_model_config(config, "config.json");
  EXPECT_EQ(c.vocab_size, 262208);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.num_layers, 48);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.hidden_act, "gelu_pytorch_tanh");
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.gemma.local_rope_theta, 1e4);
  EXPECT_TRUE(c.gemma.local_rope_scaling.type.empty());
  EXPECT_EQ(c.attention[0].sliding_window(), 1024);
  EXPECT_DOUBLE_EQ(c.gemma.attention_scaling, 1.0 / 16);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 106}));
  ASSERT_EQ(c.attention.size(), 48);
  for (int64_t i = 0; i < 48; ++i) EXPECT_EQ(c.attention[i].kind == AttentionKind::sliding, (i + 1) % 6 != 0) << i;
  EXPECT_EQ(c.tensor_prefix, "model.language_model.");
}

// NVIDIA's gemma-3-12b-it-NVFP4 layout in small: VL nesting with the vision tower and projector
// present, the MLPs NVFP4 (W4A4, an input_scale each), the attention, embeddings and lm_head
// excluded (BF16 in the release; float32 here so the reference is exact), hf_quant_config.json
// and config.json's quantization_config both written as ModelOpt does.
void write_12b_layout(const Gemma& m, const std::filesystem::path& dir) {
  write_gemma(m, dir, /*vl=*/true);
  json excl = {"lm_head", "model.vision_tower*", "model.multi_modal_projector*"};
  for (int64_t l = 0; l < m.layers; ++l) excl.push_back(fmt::format("model.language_model.layers.{}.self_attn*", l));
  const json producer = {{"name", "modelopt"}, {"version", "0.35.0"}};
  std::ofstream(dir / "hf_quant_config.json")
      << json{{"producer", producer},
              {"quantization",
               {{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16}, {"exclude_modules", excl}}}}
             .dump(2);
  std::ifstream in(dir / "config.json");
  json c = json::parse(in);
  c["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16},
                              {"ignore", excl}, {"producer", producer}};
  std::ofstream(dir / "config.json") << c.dump(2);
}

// A wrapper's lm_head sits beside model.language_model: transformers ties it by the top-level
// tie_word_embeddings, which therefore wins over text_config's where they disagree (and only then).
TEST(Gemma3, TopLevelTieWordEmbeddingsWinsOverTextConfigs) {
  auto config = [](json top_tie, json text_tie) {
    json text = {{"hidden_size", 64},          {"intermediate_size", 128}, {"num_attention_heads", 2},
                 {"num_hidden_layers", 2},     {"num_key_value_heads", 1}, {"head_dim", 32},
                 {"vocab_size", 128},          {"sliding_window", 8}};
    if (!text_tie.is_null()) text["tie_word_embeddings"] = text_tie;
    json c = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"text_config", text}};
    if (!top_tie.is_null()) c["tie_word_embeddings"] = top_tie;
    return parse_model_config(c, "config.json");
  };
  EXPECT_FALSE(config(false, true).tie_word_embeddings);
  EXPECT_TRUE(config(true, false).tie_word_embeddings);
  EXPECT_TRUE(config(nullptr, true).tie_word_embeddings);
  EXPECT_FALSE(config(nullptr, false).tie_word_embeddings);
  EXPECT_FALSE(config(false, nullptr).tie_word_embeddings);
}

TEST(Gemma3Published, Nvfp4MlpsAsTwelveBRunAsStoredAndUnderTheOverride) {
  Gemma m = make_gemma3(21);
  quantize_mlps(m, /*input_scale=*/6.0f / 2688);
  TempDir dir;
  write_12b_layout(m, dir.path());
  for (bool override_a16 : {false, true}) {
    SCOPED_TRACE(override_a16 ? "override" : "as stored");
    EngineOptions o = f32();
    if (override_a16) o.override_activation_dtype = DType::BF16;
    std::string log;
    const std::unique_ptr<CausalLM> lm = load_logged(dir.path().string(), o, log);
    EXPECT_NE(log.find("Detected ModelOpt NVFP4 checkpoint"), std::string::npos) << log;
    EXPECT_NE(log.find("stores no vision tower"), std::string::npos) << log;
    EXPECT_EQ(log.find("NVFP4 W4A16 override active") != std::string::npos, override_a16) << log;
    {
      ModelLoader l(io::Checkpoint::open(dir.path().string()), o);
      for (const LayerSpec& s : l.layers()) {
        const bool mlp = s.name.find(".mlp.") != std::string::npos;
        const auto d = l.describe(s);
        EXPECT_EQ(d.scheme.key, !mlp ? kernels::kUnquantized
                                     : override_a16 ? kernels::kNvfp4W4A16 : kernels::kNvfp4W4A4)
            << s.name;
      }
    }
    expect_replica_matches_reference(*lm, m, override_a16);
  }
}

}  // namespace
}  // namespace fp4lm::model::gemma3_test
