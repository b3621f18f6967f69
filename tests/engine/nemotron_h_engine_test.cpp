// Nemotron-H through the engine (issue 22): eight concurrent streams through the scheduler, as
// `fp4lm serve` runs them (one batched forward per step, prompts split across steps and mixed
// with decodes), each equal to the stream generated alone; and a checkpoint laid out as NVIDIA's
// Nemotron-Nano-9B-v2-NVFP4 (shrunk: the published config.json keys, "time_step_limit":
// [0.0, Infinity] as Python writes it, backbone.* names, NVFP4 W4A4 Mamba / MLP projections,
// conv1d, the attention layers and lm_head left in bfloat16) loads with the oracle's lines,
// generates, and generates under --override-activation-dtype bfloat16 on the W4A16 path. The same
// for the Nemotron 3 MoE layouts: Nano-30B-A3B NVFP4 (BF16 sensitivity layers, FP8 KV scales),
// Super-120B-A12B NVFP4 (latent MoE, an MTP layer) and Ultra's MIXED_PRECISION (routed experts
// NVFP4, shared experts and Mamba projections FP8, attention and the latent projections BF16). And
// the VL / Omni wrappers (Nemotron-Nano-12B-v2-VL's layout) run their language model exactly as the
// bare model.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "common/checkpoint_edit.h"
#include "common/log_capture.h"
#include "common/paths.h"
#include "core/error.h"
#include "engine/generator.h"
#include "io/json_file.h"
#include "io/checkpoint.h"
#include "kernels/quant_key.h"
#include "model/causal_lm.h"
#include "model/model_config.h"
#include "model/load/model_loader.h"
#include "reference/nemotron_h_reference.h"
#include "synth/synthetic_checkpoint.h"
#include "streams_check.h"

namespace fp4lm::engine::nemotron_h_engine_test {
namespace {

using nlohmann::json;

// Dense (M, *, -) and Nemotron 3 MoE (M, E, *, -: the experts run on each step's routed rows).
class NemotronHStreams : public ::testing::TestWithParam<std::string> {};

TEST_P(NemotronHStreams, EightConcurrentStreamsEqualEachAlone) {
  fp4lm::test::TempDir dir;
  fp4lm::test::nemotron::Dims d;
  d.pattern = GetParam();
  fp4lm::test::write_tiny_model(fp4lm::test::nemotron::make_model(d), dir.path());
  model::EngineOptions o;
  o.dtype = "float32";
  model::LoadOptions lo;
  lo.max_model_len = 48;
  auto lm = model::CausalLM::load(dir.path().string(), o, lo);

  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {3}, {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 2, 4}, {11, 12},
                                                     {6, 1, 8, 3, 5}, {40, 41, 42, 43, 44, 45, 46}, {90}, {2, 96, 50, 3}};
  SchedulerConfig cfg;
  cfg.max_num_seqs = 8;
  cfg.max_num_batched_tokens = 12;  // prompts split across steps and mixed with decodes
  const fp4lm::test::StreamsRun r = fp4lm::test::run_streams_alone_and_together(*lm, prompts, cfg);
  ASSERT_TRUE(r.drained);
  EXPECT_EQ(r.widest, 8u) << "all eight streams shared a forward";
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(r.together.at(static_cast<int64_t>(i)), r.alone[i]) << "stream " << i;
}

INSTANTIATE_TEST_SUITE_P(Patterns, NemotronHStreams, ::testing::Values("M*-M-M*", "ME*EM-"),
                         [](const auto& info) { return std::string(info.param == "M*-M-M*" ? "Dense" : "MoE"); });

// As stored: 8 greedy tokens in the vocabulary, the same twice; then loaded again with
// --override-activation-dtype bfloat16 (options `opts` otherwise), the W4A16 path says so and generates.
void expect_generates_as_stored_and_under_the_override(const model::CausalLM& lm, const std::string& dir,
                                                       const std::vector<int32_t>& prompt, model::EngineOptions opts) {
  RequestParams gp;
  gp.prompt = prompt;
  gp.max_tokens = 8;
  gp.ignore_eos = true;
  const GenerationResult r = generate(lm, nullptr, gp);
  ASSERT_EQ(r.output_ids.size(), 8u);
  for (int32_t id : r.output_ids) EXPECT_TRUE(id >= 0 && id < lm.vocab_size());
  EXPECT_EQ(generate(lm, nullptr, gp).output_ids, r.output_ids);  // greedy is deterministic

  opts.override_activation_dtype = DType::BF16;
  std::unique_ptr<model::CausalLM> lm16;
  std::string log;
  {
    fp4lm::test::LogCapture cap(spdlog::level::info);
    lm16 = model::CausalLM::load(dir, opts);
    log = cap.text();
  }
  EXPECT_NE(log.find("NVFP4 W4A16 override active"), std::string::npos) << log;
  EXPECT_EQ(generate(*lm16, nullptr, gp).output_ids.size(), 8u);
}

// Nemotron-Nano-9B-v2's layer pattern shrunk to 14 layers (M-M-M-MM-M-M-M*-... in the release).
constexpr const char* kNano9bPattern = "M-M-M*-M-MM*-M";

void write_nano_9b_v2_layout(const std::string& dir) {
  synth::SyntheticOptions s;
  s.architecture = "NemotronHForCausalLM";
  s.algo = quant::QuantAlgo::NVFP4;
  s.layers = 14;
  s.hybrid_pattern = kNano9bPattern;
  s.hidden = 64, s.heads = 4, s.kv_heads = 2, s.head_dim = 16, s.intermediate = 96;
  s.mamba_heads = 8, s.mamba_head_dim = 8, s.ssm_state = 16, s.mamba_groups = 2;
  // As released: lm_head, every conv1d and the attention layers stay bfloat16.
  for (int64_t i = 0; i < s.layers; ++i) {
    if (kNano9bPattern[i] == 'M') s.exclude.push_back(fmt::format("model.layers.{}.mixer.conv1d", i));
    if (kNano9bPattern[i] == '*') s.exclude.push_back(fmt::format("model.layers.{}.mixer*", i));
  }
  synth::write_synthetic_checkpoint(dir, s);
  // The release's config.json keys (older spellings next to the new ones), and the Infinity
  // Python's json writes for an unbounded time step.
  const std::string path = dir + "/config.json";
  json c = io::read_json_file(path);
  c["attention_head_dim"] = c["head_dim"];
  c["rms_norm_eps"] = 1e-5;
  c["mamba_proj_bias"] = false;
  c["time_step_min"] = 0.001, c["time_step_max"] = 0.1, c["time_step_floor"] = 1e-4, c["time_step_rank"] = 256;
  c["num_logits_to_keep"] = 1;
  c["use_mamba_kernels"] = true;
  c["sliding_window"] = nullptr;
  c["time_step_limit"] = {0.0, "INF"};
  std::string text = c.dump(2);
  text.replace(text.find("\"INF\""), 5, "Infinity");
  std::ofstream(path) << text;
}

TEST(NemotronHEngine, Nano9bV2Nvfp4LayoutLoadsAndGeneratesWithAndWithoutTheOverride) {
  fp4lm::test::TempDir tmp;
  const std::string dir = (tmp.path() / "nano9b").string();
  write_nano_9b_v2_layout(dir);
  std::unique_ptr<model::CausalLM> lm;
  std::string log;
  {
    fp4lm::test::LogCapture cap(spdlog::level::info);
    lm = model::CausalLM::load(dir, {});
    log = cap.text();
  }
  EXPECT_NE(log.find("Detected ModelOpt NVFP4 checkpoint"), std::string::npos) << log;
  EXPECT_NE(log.find("NVFP4 Linear backend out of potential backends"), std::string::npos) << log;
  EXPECT_NE(log.find("Loaded NemotronHForCausalLM (14 layers"), std::string::npos) << log;
  EXPECT_TRUE(std::isinf(lm->config().mamba.dt_max) || lm->config().mamba.dt_max > 1e300);
  // As published: Mamba and MLP projections W4A4, attention layers and lm_head bfloat16.
  model::ModelLoader l(io::Checkpoint::open(dir), {});
  auto key = [&](const std::string& layer) { return l.describe(l.layer(layer)).scheme.key; };
  EXPECT_EQ(key("model.layers.0.mixer.in_proj"), kernels::kNvfp4W4A4);
  EXPECT_EQ(key("model.layers.0.mixer.out_proj"), kernels::kNvfp4W4A4);
  EXPECT_EQ(key("model.layers.1.mixer.up_proj"), kernels::kNvfp4W4A4);
  EXPECT_EQ(key("model.layers.5.mixer.qkv_proj"), kernels::kUnquantized);
  EXPECT_EQ(key("lm_head"), kernels::kUnquantized);
  ASSERT_NE(l.checkpoint().find("backbone.layers.0.mixer.conv1d.weight"), nullptr);
  EXPECT_EQ(l.checkpoint().find("backbone.layers.0.mixer.conv1d.weight")->dtype, DType::BF16);

  expect_generates_as_stored_and_under_the_override(*lm, dir, {1, 17, 5, 96, 200}, {});
}

// NVIDIA-Nemotron-Nano-12B-v2-VL's layout (NemotronH_Nano_VL_V2; the Omni wrapper
// NemotronH_Nano_Omni_Reasoning_V3 is the same plus a sound encoder): the language model's
// config under llm_config, its tensors under language_model. (language_model.backbone.*,
// language_model.lm_head.weight) and its quantization entries too, beside the RADIO vision tower
// (vision_model.radio_model.*), the projector (mlp1.*) and the sound encoder (sound_encoder.*) —
// as vLLM's nano_nemotron_vl.py load_weights and llama.cpp's NemotronNanoV2VLModel read them. Made
// here from the Nano-9B-v2 replica (the 12B's language model has the same layer kinds), so the
// wrapper and the bare model hold the same weights.
void wrap_as_vl(const std::string& bare, const std::string& dir, const std::string& arch) {
  fp4lm::test::copy_dir(bare, dir);
  std::vector<fp4lm::test::EditedTensor> towers;
  for (const char* n : {"vision_model.radio_model.model.blocks.0.attn.qkv.weight", "mlp1.1.weight",
                        "sound_encoder.encoder.layers.0.conv.pointwise_conv1.weight"})
    towers.push_back({n, DType::BF16, {16, 32}, std::vector<uint8_t>(16 * 32 * 2, 0x3c)});
  fp4lm::test::edit_tensors(
      dir,
      [](fp4lm::test::EditedTensor& t) {
        t.name = "language_model." + t.name;
        return true;
      },
      std::move(towers));
  auto prefixed = [](json& list) {
    for (json& m : list) m = "language_model." + m.get<std::string>();
    for (const char* t : {"vision_model*", "mlp1*", "sound_encoder*"}) list.push_back(t);
  };
  json q = io::read_json_file(dir + "/hf_quant_config.json");
  prefixed(q["quantization"]["exclude_modules"]);
  std::ofstream(dir + "/hf_quant_config.json") << q.dump(2);
  json llm = io::read_json_file(dir + "/config.json");
  json qc = llm["quantization_config"];
  prefixed(qc["ignore"]);
  llm.erase("quantization_config");
  const json top = {{"architectures", {arch}},
                    {"model_type", arch},
                    {"auto_map", {{"AutoConfig", "configuration.NemotronH_Nano_VL_V2_Config"},
                                  {"AutoModel", "modeling.NemotronH_Nano_VL_V2"},
                                  {"AutoModelForCausalLM", "modeling.NemotronH_Nano_VL_V2"}}},
                    {"llm_config", llm},
                    {"vision_config", {{"model_type", "radio"}, {"patch_size", 16}, {"args", {{"model", "vit_huge_patch16_224"}}}}},
                    {"force_image_size", 512},
                    {"downsample_ratio", 0.5},
                    {"patch_size", 16},
                    {"ps_version", "v2"},
                    {"template", "nemotron_h"},
                    {"img_context_token_id", 18},
                    {"projector_hidden_size", 64},
                    {"vit_hidden_size", 32},
                    {"torch_dtype", "bfloat16"},
                    {"quantization_config", qc}};
  std::ofstream(dir + "/config.json") << top.dump(2);
}

// The wrapper loads its language model only (one INFO line says the towers are skipped), with the
// same schemes as the bare model, and generates exactly the bare model's tokens and logits.
TEST(NemotronHEngine, VlAndOmniWrappersRunTheirLanguageModelAsTheBareModel) {
  fp4lm::test::TempDir tmp;
  const std::string bare = (tmp.path() / "nano").string();
  write_nano_9b_v2_layout(bare);
  auto base = model::CausalLM::load(bare, {});
  RequestParams gp;
  gp.prompt = {1, 17, 5, 96, 200, 3, 3, 41};
  gp.max_tokens = 8;
  gp.ignore_eos = true;
  const GenerationResult want = generate(*base, nullptr, gp);
  ASSERT_EQ(want.output_ids.size(), 8u);
  std::vector<float> want_logits(static_cast<size_t>(gp.prompt.size() * base->vocab_size()));
  {
    model::SequenceState s = base->new_sequence(64);
    base->forward(s, gp.prompt.data(), static_cast<int64_t>(gp.prompt.size()), model::LogitsMode::all,
                  want_logits.data());
  }
  for (const char* arch : {"NemotronH_Nano_VL_V2", "NemotronH_Nano_Omni_Reasoning_V3"}) {
    const std::string dir = (tmp.path() / arch).string();
    wrap_as_vl(bare, dir, arch);
    std::unique_ptr<model::CausalLM> lm;
    std::string log;
    {
      fp4lm::test::LogCapture cap(spdlog::level::info);
      lm = model::CausalLM::load(dir, {});
      log = cap.text();
    }
    EXPECT_NE(log.find(std::string(arch) + ": loading the language model only"), std::string::npos) << log;
    EXPECT_NE(log.find("Detected ModelOpt NVFP4 checkpoint"), std::string::npos) << log;
    EXPECT_EQ(lm->config().architecture, arch);
    EXPECT_EQ(lm->config().mamba.pattern, kNano9bPattern);
    model::ModelLoader l(io::Checkpoint::open(dir), {});
    auto key = [&](const std::string& layer) { return l.describe(l.layer(layer)).scheme.key; };
    EXPECT_EQ(key("model.layers.0.mixer.in_proj"), kernels::kNvfp4W4A4);
    EXPECT_EQ(key("model.layers.5.mixer.qkv_proj"), kernels::kUnquantized);
    EXPECT_EQ(key("lm_head"), kernels::kUnquantized);
    EXPECT_EQ(generate(*lm, nullptr, gp).output_ids, want.output_ids) << arch;
    std::vector<float> got(want_logits.size());
    model::SequenceState s = lm->new_sequence(64);
    lm->forward(s, gp.prompt.data(), static_cast<int64_t>(gp.prompt.size()), model::LogitsMode::all, got.data());
    EXPECT_EQ(std::memcmp(got.data(), want_logits.data(), got.size() * sizeof(float)), 0) << arch;
  }
  // Without its language model's config the wrapper names the key it needs.
  json c = io::read_json_file((tmp.path() / "NemotronH_Nano_VL_V2").string() + "/config.json");
  c.erase("llm_config");
  try {
    model::parse_model_config(c, "vl/config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vl/config.json: NemotronH_Nano_VL_V2 needs an object 'llm_config' or "
                                         "'text_config'"),
              std::string::npos)
        << e.what();
  }
}

// The Nemotron 3 MoE releases, shrunk to 16 layers with their layer kinds in the published order
// (Nano-30B-A3B: 52 layers MEMEM*EMEMEM*EMEMEM*..., 128 experts, 6 per token, routed_scaling_factor
// 2.5; Super-120B-A12B: 88 layers MEMEMEM*..., 512 experts, 22 per token, moe_latent_size 1024,
// routed_scaling_factor 5.0, one MTP layer; Ultra the Super layout at 550B). Random weights.
enum class Nemotron3 { nano_30b, super_120b, ultra };

struct Nemotron3Layout {
  std::string pattern;
  int64_t layers = 16;
};

Nemotron3Layout write_nemotron3_layout(const std::string& dir, Nemotron3 kind) {
  const std::string pattern = kind == Nemotron3::nano_30b ? "MEMEM*EMEMEM*EME" : "MEMEMEM*EMEMEM*E";
  synth::SyntheticOptions s;
  s.architecture = "NemotronHForCausalLM";
  s.layers = static_cast<int64_t>(pattern.size());
  s.hybrid_pattern = pattern;
  s.hidden = 64, s.heads = 4, s.kv_heads = 2, s.head_dim = 16, s.intermediate = 32;
  s.mamba_heads = 8, s.mamba_head_dim = 8, s.ssm_state = 16, s.mamba_groups = 2;
  s.experts = 16, s.top_k = kind == Nemotron3::nano_30b ? 6 : 8, s.moe_intermediate = 32;
  s.shared_expert_intermediate = 64;
  if (kind != Nemotron3::nano_30b) s.moe_latent = 32;
  s.extra_tensors = kind != Nemotron3::nano_30b;  // the MTP layer's mtp.* tensors
  if (kind == Nemotron3::ultra) {
    // MIXED_PRECISION: routed experts NVFP4, shared experts and Mamba projections FP8; attention,
    // the latent projections, conv1d, routers and lm_head unlisted (bfloat16).
    s.algo = quant::QuantAlgo::MIXED_PRECISION;
    for (int64_t i = 0; i < s.layers; ++i) {
      const std::string p = fmt::format("model.layers.{}.mixer.", i);
      if (pattern[i] == 'M')
        for (const char* m : {"in_proj", "out_proj"}) s.mixed[p + m] = quant::QuantAlgo::FP8;
      if (pattern[i] != 'E') continue;
      for (const char* m : {"shared_experts.up_proj", "shared_experts.down_proj"}) s.mixed[p + m] = quant::QuantAlgo::FP8;
      for (int64_t e = 0; e < s.experts; ++e)
        for (const char* m : {"up_proj", "down_proj"})
          s.mixed[fmt::format("{}experts.{}.{}", p, e, m)] = quant::QuantAlgo::NVFP4;
    }
  } else {
    // NVFP4 with the Nano recipe's BF16 layers: the attention layers, the Mamba layers that feed
    // them, every conv1d (routers and lm_head are never quantized); for Super also the latent
    // projections.
    s.algo = quant::QuantAlgo::NVFP4;
    for (int64_t i = 0; i < s.layers; ++i) {
      const char here = pattern[i], next = i + 1 < s.layers ? pattern[i + 1] : 0;
      const std::string p = fmt::format("model.layers.{}.mixer", i);
      if (here == 'M') s.exclude.push_back(p + ".conv1d");
      if (here == '*' || (here == 'M' && next == '*')) s.exclude.push_back(p + "*");
      if (here == 'E' && s.moe_latent > 0)
        for (const char* m : {".fc1_latent_proj", ".fc2_latent_proj"}) s.exclude.push_back(p + m);
    }
  }
  synth::write_synthetic_checkpoint(dir, s);
  // The FP8 KV cache: kv_cache_quant_algo and a k_scale / v_scale per attention layer.
  std::vector<fp4lm::test::EditedTensor> scales;
  for (int64_t i = 0; i < s.layers; ++i) {
    if (pattern[i] != '*') continue;
    for (auto [n, v] : {std::pair{"k_proj.k_scale", 0.05f + 0.01f * static_cast<float>(i)}, {"v_proj.v_scale", 0.03f}}) {
      fp4lm::test::EditedTensor t{fmt::format("backbone.layers.{}.mixer.{}", i, n), DType::F32, {}, std::vector<uint8_t>(4)};
      std::memcpy(t.bytes.data(), &v, 4);
      scales.push_back(std::move(t));
    }
  }
  fp4lm::test::edit_tensors(dir, [](fp4lm::test::EditedTensor&) { return true; }, std::move(scales));
  json q = io::read_json_file(dir + "/hf_quant_config.json");
  q["quantization"]["kv_cache_quant_algo"] = "FP8";
  std::ofstream(dir + "/hf_quant_config.json") << q.dump(2);
  // The release's config.json keys.
  const std::string path = dir + "/config.json";
  json c = io::read_json_file(path);
  c["quantization_config"]["kv_cache_quant_algo"] = "FP8";
  c["n_shared_experts"] = 1;
  c["n_group"] = 1, c["topk_group"] = 1;
  c["norm_eps"] = 1e-5;
  c["rope_theta"] = 10000;
  c["partial_rotary_factor"] = 1.0;
  c["rescale_prenorm_residual"] = true;
  c["mamba_proj_bias"] = false;
  c["time_step_min"] = 0.001, c["time_step_max"] = 0.1, c["time_step_floor"] = 1e-4;
  c["num_logits_to_keep"] = 1;
  c["use_mamba_kernels"] = true;
  c["sliding_window"] = nullptr;
  c["expand"] = 2;
  c.erase("time_step_limit");
  if (kind != Nemotron3::nano_30b) {
    c["routed_scaling_factor"] = 5.0;
    c["num_nextn_predict_layers"] = 1;
    c["mtp_hybrid_override_pattern"] = "*E";
  }
  std::ofstream(path) << c.dump(2);
  return {pattern, s.layers};
}

class Nemotron3Published : public ::testing::TestWithParam<Nemotron3> {};

TEST_P(Nemotron3Published, LoadsWithTheOracleLinesAndGeneratesWithAndWithoutTheOverride) {
  const Nemotron3 kind = GetParam();
  fp4lm::test::TempDir tmp;
  const std::string dir = (tmp.path() / "nemotron3").string();
  const Nemotron3Layout layout = write_nemotron3_layout(dir, kind);
  std::unique_ptr<model::CausalLM> lm;
  std::string log;
  model::EngineOptions fp8;
  fp8.kv_cache_dtype = "fp8";
  {
    fp4lm::test::LogCapture cap(spdlog::level::info);
    lm = model::CausalLM::load(dir, fp8);
    log = cap.text();
  }
  EXPECT_NE(log.find(kind == Nemotron3::ultra ? "Detected ModelOpt MIXED_PRECISION checkpoint"
                                              : "Detected ModelOpt NVFP4 checkpoint"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("NVFP4 Linear backend out of potential backends"), std::string::npos) << log;
  if (kind == Nemotron3::ultra) {
    EXPECT_NE(log.find("FP8 Linear backend out of potential backends"), std::string::npos) << log;
  }
  EXPECT_NE(log.find("Loaded NemotronHForCausalLM (16 layers"), std::string::npos) << log;
  EXPECT_EQ(log.find("k_scale/v_scale tensors are absent"), std::string::npos) << log;
  const size_t mtp = log.find("Skipping the multi-token-prediction layers");
  EXPECT_EQ(mtp == std::string::npos, kind == Nemotron3::nano_30b) << log;
  EXPECT_EQ(lm->config().moe.num_experts, 16);
  EXPECT_DOUBLE_EQ(lm->config().moe.sigmoid.routed_scaling_factor, kind == Nemotron3::nano_30b ? 2.5 : 5.0);
  EXPECT_EQ(lm->config().mamba.moe_latent_size, kind == Nemotron3::nano_30b ? 0 : 32);

  // Each module's scheme as published.
  model::ModelLoader l(io::Checkpoint::open(dir), {});
  auto key = [&](const std::string& layer) { return l.describe(l.layer(layer)).scheme.key; };
  const int64_t attn = static_cast<int64_t>(layout.pattern.find('*'));
  const bool ultra = kind == Nemotron3::ultra;
  EXPECT_EQ(key("model.layers.0.mixer.in_proj"), ultra ? kernels::kFp8 : kernels::kNvfp4W4A4);
  EXPECT_EQ(key("model.layers.1.mixer.experts.0.up_proj"), kernels::kNvfp4W4A4);
  EXPECT_EQ(key("model.layers.1.mixer.experts.15.down_proj"), kernels::kNvfp4W4A4);
  EXPECT_EQ(key("model.layers.1.mixer.shared_experts.up_proj"), ultra ? kernels::kFp8 : kernels::kNvfp4W4A4);
  EXPECT_EQ(key("model.layers.1.mixer.gate"), kernels::kUnquantized);
  EXPECT_EQ(key(fmt::format("model.layers.{}.mixer.in_proj", attn - 1)),
            ultra ? kernels::kFp8 : kernels::kUnquantized);  // feeds the attention layer
  EXPECT_EQ(key(fmt::format("model.layers.{}.mixer.qkv_proj", attn)), kernels::kUnquantized);
  if (kind != Nemotron3::nano_30b) {
    EXPECT_EQ(key("model.layers.1.mixer.fc1_latent_proj"), kernels::kUnquantized);
  }
  EXPECT_EQ(key("lm_head"), kernels::kUnquantized);

  expect_generates_as_stored_and_under_the_override(*lm, dir, {1, 17, 5, 96, 200, 31, 7}, fp8);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Nemotron3Published,
                         ::testing::Values(Nemotron3::nano_30b, Nemotron3::super_120b, Nemotron3::ultra),
                         [](const auto& info) {
                           return info.param == Nemotron3::nano_30b   ? "Nano30bA3bNvfp4"
                                  : info.param == Nemotron3::super_120b ? "Super120bA12bNvfp4"
                                                                        : "UltraMixedPrecision";
                         });

}  // namespace
}  // namespace fp4lm::engine::nemotron_h_engine_test
