// `fp4lm inspect --json` layer report (issue 3's CLI contract) on a tiny NVFP4 MoE checkpoint
// written by `fp4lm synth`, plain and with --override-activation-dtype, files untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "common/paths.h"

using fp4lm::test::fp4lm_bin;
using fp4lm::test::run_command;
using nlohmann::json;


namespace inspect_layers_cli_test {
namespace {

std::string dir_bytes(const std::filesystem::path& dir) {
  std::string all;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) all += f.filename().string() + "\n" + fp4lm::test::read_file(f);
  return all;
}

json inspect(const std::string& dir, const std::string& extra = "") {
  auto r = run_command(fp4lm_bin() + " inspect --json --model " + dir + " " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

}  // namespace

TEST(InspectLayersCli, Nvfp4MoeShowsW4A4AndOverrideShowsW4A16WithFilesUnchanged) {
  fp4lm::test::TempDir tmp;
  const std::string dir = (tmp / "moe").string();
  auto w = run_command(fp4lm_bin() + " synth --out " + dir + " --arch Qwen3MoeForCausalLM --algo NVFP4 --layers 2");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const std::string before = dir_bytes(dir);

  json plain = inspect(dir);
  EXPECT_EQ(plain["quantization"]["quant_algo"], "NVFP4");
  EXPECT_EQ(plain["quantization"]["group_size"], 16);
  EXPECT_EQ(plain["quantization"]["override_activation_dtype"], "auto");
  const json& layers = plain["layers"];
  std::vector<std::string> names;
  for (const json& l : layers) names.push_back(l["name"]);
  std::vector<std::string> want = {"model.layers.0.self_attn.qkv_proj", "model.layers.0.self_attn.o_proj",
                                   "model.layers.0.mlp.gate",           "model.layers.0.mlp.experts",
                                   "model.layers.1.self_attn.qkv_proj", "model.layers.1.self_attn.o_proj",
                                   "model.layers.1.mlp.gate",           "model.layers.1.mlp.experts",
                                   "lm_head"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(layers[0]["shards"], json({"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
                                       "model.layers.0.self_attn.v_proj"}));
  int quantized = 0;
  for (const json& l : layers) {
    EXPECT_TRUE(l["candidates"].is_array() && !l["candidates"].empty());
    if (l["on_disk"] != "NVFP4") continue;
    ++quantized;
    EXPECT_EQ(l["scheme"], "nvfp4_w4a4") << l.dump();
    EXPECT_EQ(l["activation_dtype"], "bfloat16");
  }
  EXPECT_EQ(quantized, 6);
  EXPECT_EQ(layers[3]["kind"], "moe");
  EXPECT_EQ(layers[8]["scheme"], "unquantized");

  for (const char* dt : {"bfloat16", "float16"}) {
    json over = inspect(dir, std::string("--override-activation-dtype ") + dt);
    EXPECT_EQ(over["quantization"]["override_activation_dtype"], dt);
    ASSERT_EQ(over["layers"].size(), layers.size());
    for (size_t i = 0; i < layers.size(); ++i) {
      const json& l = over["layers"][i];
      if (l["on_disk"] != "NVFP4") continue;
      EXPECT_EQ(l["scheme"], "nvfp4_w4a16") << l.dump();
      EXPECT_EQ(l["activation_dtype"], dt);
      EXPECT_NE(l["backend"], layers[i]["backend"].get<std::string>() == "reference" ? "" : layers[i]["backend"]);
    }
  }
  EXPECT_EQ(before, dir_bytes(dir)) << "the override must never modify the checkpoint";
}

TEST(InspectLayersCli, BadEngineFlagsAreUsageErrors) {
  fp4lm::test::TempDir tmp;
  const std::string dir = (tmp / "d").string();
  ASSERT_EQ(run_command(fp4lm_bin() + " synth --out " + dir + " --arch LlamaForCausalLM --algo W4A16_NVFP4").exit_code, 0);
  auto r = run_command(fp4lm_bin() + " inspect --model " + dir + " --override-activation-dtype int8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("override_activation_dtype must be auto, bfloat16 or float16"), std::string::npos) << r.err;
  r = run_command(fp4lm_bin() + " inspect --model " + dir + " --linear-backend nope");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown backend 'nope'"), std::string::npos) << r.err;
  r = run_command(fp4lm_bin() + " inspect --json --model " + dir + " --linear-backend reference");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json forced = json::parse(r.out);  // named: a range-for over a temporary's member dangles
  for (const json& l : forced["layers"]) EXPECT_EQ(l["backend"], "reference");
  r = run_command(fp4lm_bin() + " inspect --model " + dir + " --linear-backend cpu_w4a4_avx2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot run layer"), std::string::npos) << r.err;
}

TEST(BackendsCli, ListsTheRegistryInOrder) {
  auto r = run_command(fp4lm_bin() + " backends --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json all = json::parse(r.out);
  ASSERT_GE(all.size(), 2u);
  bool has_ref_linear = false, has_ref_moe = false;
  std::vector<std::string> attention, selected;
  for (const json& b : all) {
    has_ref_linear |= b["name"] == "reference" && b["kind"] == "linear";
    has_ref_moe |= b["name"] == "reference" && b["kind"] == "moe";
    EXPECT_TRUE(b["available"].get<bool>() || !b["unavailable_reason"].get<std::string>().empty());
    if (b["kind"] != "attention") continue;
    attention.push_back(b["name"]);
    if (b["selected"].get<bool>()) {
      selected.push_back(b["name"]);
      EXPECT_TRUE(b["available"].get<bool>()) << b.dump();
    }
  }
  EXPECT_TRUE(has_ref_linear && has_ref_moe);
  // The attention kernel's variants follow, in priority order; the first available one runs.
  EXPECT_EQ(attention, (std::vector<std::string>{"avx512", "avx2", "reference"}));
  ASSERT_EQ(selected.size(), 1u);
  for (const json& b : all)
    if (b["kind"] == "attention" && b["available"].get<bool>()) {
      EXPECT_EQ(b["name"], selected[0]);
      break;
    }
}

TEST(BackendsCli, AttentionKernelChosenByTheEnvironmentOrAnErrorNamingTheVariants) {
  auto r = run_command("FP4LM_ATTENTION_KERNEL=reference " + fp4lm_bin() + " backends");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("reference            attention  cpu  portable kv_cache_dtypes=[float32, bfloat16, float16, "
                       "fp8]  available (selected)"),
            std::string::npos)
      << r.out;
  r = run_command("FP4LM_ATTENTION_KERNEL=sse9 " + fp4lm_bin() + " backends");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("FP4LM_ATTENTION_KERNEL=sse9: unknown attention kernel (variants: avx512, avx2, reference)"),
            std::string::npos)
      << r.err;
  // A model load fails on it too, before generating anything; a valid choice is logged.
  fp4lm::test::TempDir tmp;
  const std::string dir = (tmp / "llama").string();
  ASSERT_EQ(run_command(fp4lm_bin() + " synth --out " + dir + " --arch LlamaForCausalLM --algo none").exit_code, 0);
  r = run_command("FP4LM_ATTENTION_KERNEL=sse9 " + fp4lm_bin() + " generate --model " + dir + " --prompt-ids 1,2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("unknown attention kernel"), std::string::npos) << r.err;
  r = run_command("FP4LM_ATTENTION_KERNEL=reference " + fp4lm_bin() + " generate --model " + dir +
                  " --prompt-ids 1,2 --max-tokens 2");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("Using 'reference' attention kernel out of potential kernels: [avx512, avx2, reference]"),
            std::string::npos)
      << r.err;
}

TEST(InspectLayersCli, HybridShowsLayerTypesAndEachLayersSchemeAndGenerates) {
  fp4lm::test::TempDir tmp;
  const std::string dir = (tmp / "hybrid").string();
  auto w = run_command(fp4lm_bin() + " synth --out " + dir + " --arch Qwen3_5MoeForCausalLM --algo NVFP4 --layers 4");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  json f = inspect(dir);
  EXPECT_EQ(f["architecture"], "Qwen3_5MoeForCausalLM");
  EXPECT_EQ(f["layer_types"], json({"linear_attention", "full_attention", "linear_attention", "full_attention"}));
  std::map<std::string, std::string> scheme;
  for (const json& l : f["layers"]) scheme[l["name"]] = l["scheme"];
  EXPECT_EQ(scheme["model.layers.0.linear_attn.in_proj_qkv"], "nvfp4_w4a4");
  EXPECT_EQ(scheme["model.layers.0.linear_attn.in_proj_z"], "nvfp4_w4a4");
  EXPECT_EQ(scheme["model.layers.0.linear_attn.out_proj"], "nvfp4_w4a4");
  EXPECT_EQ(scheme["model.layers.0.linear_attn.in_proj_ba"], "unquantized");  // like routers
  EXPECT_EQ(scheme["model.layers.1.self_attn.qkv_proj"], "nvfp4_w4a4");
  EXPECT_EQ(scheme["model.layers.1.mlp.experts"], "nvfp4_w4a4");
  EXPECT_EQ(scheme["model.layers.1.mlp.shared_expert_gate"], "unquantized");
  EXPECT_EQ(scheme.count("model.layers.0.self_attn.qkv_proj"), 0u);
  // The writer lists the GDN's router-like projections by their stored names, as ModelOpt does.
  const json excl = f["quantization"]["exclude_modules"];
  for (const char* m : {"model.layers.0.linear_attn.in_proj_b", "model.layers.0.linear_attn.in_proj_a"})
    EXPECT_NE(std::find(excl.begin(), excl.end(), json(m)), excl.end()) << m << " in " << excl.dump();
  EXPECT_EQ(std::find(excl.begin(), excl.end(), json("model.layers.0.linear_attn.in_proj_ba")), excl.end());
  auto text = run_command(fp4lm_bin() + " inspect --model " + dir);
  EXPECT_NE(text.out.find("linear_attention, full_attention"), std::string::npos) << text.out;
  auto g = run_command(fp4lm_bin() + " generate --model " + dir + " --prompt-ids 1,5,9 --max-tokens 6");
  EXPECT_EQ(g.exit_code, 0) << g.err;
}

// Qwen3-Next's fused in_proj_qkvz / in_proj_ba, and the VL Qwen3.5 form with fused 3-D expert
// tensors and mtp / vision tensors: inspect, generate, eval and quantize through the CLI.
TEST(InspectLayersCli, Qwen3NextAndVlHybridWithFusedExpertsRunThroughEveryCommand) {
  fp4lm::test::TempDir tmp;
  const std::string next = (tmp / "next").string();
  auto w = run_command(fp4lm_bin() + " synth --out " + next + " --arch Qwen3NextForCausalLM --algo NVFP4 --layers 4");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  json f = inspect(next);
  EXPECT_EQ(f["layer_types"], json({"linear_attention", "full_attention", "linear_attention", "full_attention"}));
  std::map<std::string, std::string> scheme;
  for (const json& l : f["layers"]) scheme[l["name"]] = l["scheme"];
  EXPECT_EQ(scheme["model.layers.0.linear_attn.in_proj_qkvz"], "nvfp4_w4a4");
  EXPECT_EQ(scheme["model.layers.0.linear_attn.in_proj_ba"], "unquantized");
  EXPECT_EQ(scheme.count("model.layers.0.linear_attn.in_proj_qkv"), 0u);
  const json next_excl = f["quantization"]["exclude_modules"];
  EXPECT_NE(std::find(next_excl.begin(), next_excl.end(), json("model.layers.0.linear_attn.in_proj_ba")),
            next_excl.end())
      << next_excl.dump();
  auto g = run_command(fp4lm_bin() + " generate --model " + next + " --prompt-ids 1,5,9 --max-tokens 4");
  EXPECT_EQ(g.exit_code, 0) << g.err;

  const std::string vl = (tmp / "vl").string();
  w = run_command(fp4lm_bin() + " synth --out " + vl +
                  " --arch Qwen3_5MoeForConditionalGeneration --algo none --fused-experts --extra-tensors --layers 4");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  f = inspect(vl);
  EXPECT_EQ(f["architecture"], "Qwen3_5MoeForConditionalGeneration");
  EXPECT_EQ(f["layer_types"][1], "full_attention");
  const std::string ids = (tmp / "ids.jsonl").string();
  std::ofstream(ids) << "{\"ids\": [1, 5, 9, 13, 40, 41, 7, 3, 99, 100]}\n[2, 7, 100, 4]\n";
  auto e = run_command(fp4lm_bin() + " eval --json --model " + vl + " --ids " + ids);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const json ev = json::parse(e.out);
  EXPECT_EQ(ev["tokens"], 12);
  EXPECT_GT(ev["perplexity"].get<double>(), 1.0);
  // bf16 -> W4A16_NVFP4: the fused experts are written per expert, the stored names kept.
  const std::string q = (tmp / "vl-w4a16").string();
  auto qr = run_command(fp4lm_bin() + " quantize --model " + vl + " --out " + q + " --algo W4A16_NVFP4");
  ASSERT_EQ(qr.exit_code, 0) << qr.err;
  f = inspect(q);
  scheme.clear();
  for (const json& l : f["layers"]) scheme[l["name"]] = l["scheme"];
  EXPECT_EQ(scheme["model.layers.0.mlp.experts"], "nvfp4_w4a16");
  EXPECT_EQ(scheme["model.layers.0.linear_attn.in_proj_qkv"], "nvfp4_w4a16");
  EXPECT_EQ(scheme["model.layers.0.linear_attn.in_proj_ba"], "unquantized");
  const json excl = f["quantization"]["exclude_modules"];
  for (const char* m : {"model.language_model.layers.0.linear_attn.in_proj_b",
                        "model.language_model.layers.0.linear_attn.in_proj_a",
                        "model.language_model.layers.0.linear_attn.conv1d", "model.language_model.layers.0.mlp.gate",
                        "model.language_model.layers.0.mlp.shared_expert_gate", "mtp*", "model.visual*"})
    EXPECT_NE(std::find(excl.begin(), excl.end(), json(m)), excl.end()) << m << " in " << excl.dump();
  g = run_command(fp4lm_bin() + " generate --model " + q + " --prompt-ids 1,5,9 --max-tokens 4");
  EXPECT_EQ(g.exit_code, 0) << g.err;
}

// config.json's quantization_config and hf_quant_config.json disagree: inspect reports what the
// loader WARNs about (both files, what differs, what the tensors decided), in --json and in the
// human form, and still exits 0; agreeing files report nothing.
TEST(InspectLayersCli, DisagreeingConfigFilesAreReported) {
  fp4lm::test::TempDir tmp;
  const std::string dir = (tmp / "dense").string();
  auto w = run_command(fp4lm_bin() + " synth --out " + dir + " --arch LlamaForCausalLM --algo NVFP4 --layers 1");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_TRUE(inspect(dir)["quantization"]["config_disagreement"].is_null());

  const std::filesystem::path hf = std::filesystem::path(dir) / "hf_quant_config.json";
  json h = json::parse(fp4lm::test::read_file(hf));
  h["quantization"]["quant_algo"] = "W4A16_NVFP4";
  fp4lm::test::write_file(hf, h.dump());

  const json facts = inspect(dir);
  const std::string d = facts["quantization"]["config_disagreement"].get<std::string>();
  EXPECT_NE(d.find("config.json: quantization_config and "), std::string::npos) << d;
  EXPECT_NE(d.find("hf_quant_config.json disagree"), std::string::npos) << d;
  // The synthetic layers carry input_scale: the tensors say W4A4.
  EXPECT_NE(d.find("module(s) NVFP4 per config.json, W4A16_NVFP4 per hf_quant_config.json -> NVFP4"), std::string::npos)
      << d;
  EXPECT_EQ(facts["quantization"]["quant_algo"], "NVFP4");  // config.json first, as vLLM

  auto human = run_command(fp4lm_bin() + " inspect --model " + dir);
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("  files disagree      " + d), std::string::npos) << human.out;
}

}  // namespace inspect_layers_cli_test
