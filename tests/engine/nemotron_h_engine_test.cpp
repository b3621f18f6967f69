// Nemotron-H through the engine (issue 22): eight concurrent streams through the scheduler, as
// `fp4lm serve` runs them (one batched forward per step, prompts split across steps and mixed
// with decodes), each equal to the stream generated alone; and a checkpoint laid out as NVIDIA's
// Nemotron-Nano-9B-v2-NVFP4 (shrunk: the published config.json keys, "time_step_limit":
// [0.0, Infinity] as Python writes it, backbone.* names, NVFP4 W4A4 Mamba / MLP projections,
// conv1d, the attention layers and lm_head left in bfloat16) loads with the oracle's lines,
// generates, and generates under --override-activation-dtype bfloat16 on the W4A16 path.
#include <gtest/gtest.h>

#include <fstream>

#include "common/log_capture.h"
#include "common/paths.h"
#include "engine/generator.h"
#include "io/json_file.h"
#include "io/checkpoint.h"
#include "kernels/quant_key.h"
#include "model/causal_lm.h"
#include "model/model_loader.h"
#include "model/nemotron_h_reference.h"
#include "model/synthetic_checkpoint.h"
#include "streams_check.h"

namespace fp4lm::engine {
namespace {

using nlohmann::json;

TEST(NemotronHEngine, EightConcurrentStreamsEqualEachAlone) {
  fp4lm::test::TempDir dir;
  test::write_tiny_model(test::nemotron::make_model({}), dir.path());
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
  const test::StreamsRun r = test::run_streams_alone_and_together(*lm, prompts, cfg);
  ASSERT_TRUE(r.drained);
  EXPECT_EQ(r.widest, 8u) << "all eight streams shared a forward";
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(r.together.at(static_cast<int64_t>(i)), r.alone[i]) << "stream " << i;
}

// Nemotron-Nano-9B-v2's layer pattern shrunk to 14 layers (M-M-M-MM-M-M-M*-... in the release).
constexpr const char* kNano9bPattern = "M-M-M*-M-MM*-M";

void write_nano_9b_v2_layout(const std::string& dir) {
  model::SyntheticOptions s;
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
  model::write_synthetic_checkpoint(dir, s);
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
    test::LogCapture cap(spdlog::level::info);
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

  RequestParams gp;
  gp.prompt = {1, 17, 5, 96, 200};
  gp.max_tokens = 8;
  gp.ignore_eos = true;
  const GenerationResult r = generate(*lm, nullptr, gp);
  ASSERT_EQ(r.output_ids.size(), 8u);
  for (int32_t id : r.output_ids) EXPECT_TRUE(id >= 0 && id < lm->vocab_size());
  EXPECT_EQ(generate(*lm, nullptr, gp).output_ids, r.output_ids);  // greedy is deterministic

  model::EngineOptions over;
  over.override_activation_dtype = DType::BF16;
  std::unique_ptr<model::CausalLM> lm16;
  {
    test::LogCapture cap(spdlog::level::info);
    lm16 = model::CausalLM::load(dir, over);
    log = cap.text();
  }
  EXPECT_NE(log.find("NVFP4 W4A16 override active"), std::string::npos) << log;
  EXPECT_EQ(generate(*lm16, nullptr, gp).output_ids.size(), 8u);
}

}  // namespace
}  // namespace fp4lm::engine
