// `fp4lm generate` on a DiffusionGemma checkpoint: output_ids equal to transformers'
// DiffusionGemmaForBlockDiffusion.generate with the deterministic rule (pad canvas, argmax
// denoiser; scripts/make_diffusion_gemma_goldens.py), across two and three canvases, a canvas
// that the stability and confidence stop ends early, and a stop token inside a canvas. What it
// does not support is refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/paths.h"

namespace fp4lm::diffusion_gemma_cli_test {
namespace {

using nlohmann::json;

std::string model() { return (test::source_dir() / "tests/model/fixtures/diffusion_gemma/tiny").string(); }

json goldens() {
  std::ifstream in(test::source_dir() / "tests/model/fixtures/diffusion_gemma/tiny/goldens.json");
  return json::parse(in);
}

std::string id_list(const json& ids) {
  std::string s;
  for (const auto& v : ids) s += (s.empty() ? "" : ",") + std::to_string(v.get<int>());
  return s;
}

json case_named(const std::string& name) {
  const json g = goldens();  // kept alive: a range-for over goldens()["cases"] would dangle
  for (const json& c : g["cases"])
    if (c["name"] == name) return c;
  ADD_FAILURE() << name;
  return {};
}

json run_case(const json& c, const std::string& extra, const std::string& temperature = "0") {
  const auto r = test::run_fp4lm("generate --model " + model() + " --prompt-ids " + id_list(c["prompt_ids"]) +
                                 " --max-tokens " + std::to_string(c["max_tokens"].get<int>()) +
                                 " --temperature " + temperature + " --json --dtype float32 " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? json::parse(r.out) : json();
}

TEST(DiffusionGemmaCli, TwoCanvasesWithAnEarlyStopEqualTransformers) {
  const json c = case_named("two_canvases");
  ASSERT_GE(c["early_stops"].get<int>(), 1);  // the fixture exercises the stability + confidence stop
  const json out = run_case(c, "--ignore-eos");
  EXPECT_EQ(out["output_ids"], c["output_ids"]);
  EXPECT_EQ(out["finish_reason"], "length");
  EXPECT_EQ(out["diffusion"]["canvases"], 2);
  EXPECT_EQ(out["diffusion"]["decoder_passes"], c["decoder_passes"]);
  EXPECT_EQ(out["diffusion"]["early_stops"], c["early_stops"]);
}

TEST(DiffusionGemmaCli, ThreeCanvasesAfterAPromptPastTheSlidingWindowEqualTransformers) {
  const json c = case_named("three_canvases_long_prompt");
  const json out = run_case(c, "--ignore-eos");
  EXPECT_EQ(out["output_ids"], c["output_ids"]);
  EXPECT_EQ(out["diffusion"]["canvases"], 3);
  EXPECT_EQ(out["diffusion"]["decoder_passes"], c["decoder_passes"]);
}

TEST(DiffusionGemmaCli, AStopTokenEndsTheOutputWhereTransformersPads) {
  const json c = case_named("stop_token");
  const int stop = c["stop_token_ids"][0].get<int>();
  const json out = run_case(c, "--stop-token-ids " + std::to_string(stop));
  // transformers keeps the canvas and pads after the stop token; fp4lm ends at it.
  std::vector<int> want;
  for (const json& t : c["output_ids"]) {
    want.push_back(t.get<int>());
    if (want.back() == stop) break;
  }
  ASSERT_LT(want.size(), c["output_ids"].size());
  EXPECT_EQ(out["output_ids"], json(want));
  EXPECT_EQ(out["finish_reason"], "stop");
  EXPECT_EQ(out["stop_reason"], stop);
  EXPECT_EQ(out["diffusion"]["canvases"], 2);
}

TEST(DiffusionGemmaCli, MaxTokensCutsTheLastCanvas) {
  const json c = case_named("two_canvases");
  json shorter = c;
  shorter["max_tokens"] = 11;
  const json out = run_case(shorter, "--ignore-eos");
  std::vector<int> want;
  for (int k = 0; k < 11; ++k) want.push_back(c["output_ids"][k].get<int>());
  EXPECT_EQ(out["output_ids"], json(want));
}

TEST(DiffusionGemmaCli, UnsupportedRequestsAreRefusedByName) {
  const std::string base = "generate --model " + model() + " --prompt-ids 2,17,33 --max-tokens 8 ";
  auto r = test::run_fp4lm(base + "--temperature 0.7");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--temperature: DiffusionGemma's temperatures are the t_max..t_min schedule"), std::string::npos)
      << r.err;
  r = test::run_fp4lm(base + "--logprobs 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--logprobs: DiffusionGemma does not support logprobs"), std::string::npos) << r.err;
  r = test::run_fp4lm(base + "--repetition-penalty 1.2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("DiffusionGemma does not support penalties"), std::string::npos) << r.err;
  r = test::run_fp4lm(base + "--prompt-ids 2,500");
  EXPECT_NE(r.exit_code, 0);
  // Other commands load a CausalLM: a clear error, not "unsupported architecture".
  r = test::run_fp4lm("inspect --model " + model());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("supported only through `fp4lm generate`"), std::string::npos) << r.err;
  // eval opens it as every front end does (engine::Runtime::open) and says why it cannot score it.
  test::TempDir ids;
  std::ofstream(ids / "ids.jsonl") << "[2, 17, 33]\n";
  r = test::run_fp4lm("eval --model " + model() + " --ids " + (ids / "ids.jsonl").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a token-by-token model"), std::string::npos) << r.err;
}

TEST(DiffusionGemmaCli, Bfloat16ActivationsGenerate) {
  // --dtype bfloat16: the Linear / MoE layers round their inputs and outputs to bfloat16 (the
  // attention, norms and loop stay float32). This random model's denoising amplifies rounding, so
  // the ids are not compared with the float32 goldens: it runs and gives every token asked.
  const json c = case_named("two_canvases");
  const auto r = test::run_fp4lm("generate --model " + model() + " --prompt-ids " + id_list(c["prompt_ids"]) +
                                 " --max-tokens 16 --temperature 0 --ignore-eos --json --dtype bfloat16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["output_ids"].size(), 16u);
}

// The ModelOpt NVFP4 fixtures (scripts/make_diffusion_gemma_nvfp4_goldens.py).
json nvfp4_generate(const std::string& name) {
  const std::filesystem::path d = test::source_dir() / "tests/model/fixtures/diffusion_gemma" / name;
  std::ifstream in(d / "goldens.json");
  const json g = json::parse(in)["generate"];
  const auto r = test::run_fp4lm("generate --model " + d.string() + " --prompt-ids " + id_list(g["prompt_ids"]) +
                                 " --max-tokens " + std::to_string(g["max_tokens"].get<int>()) +
                                 " --temperature 0 --ignore-eos --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json out = r.exit_code == 0 ? json::parse(r.out) : json();
  out["golden"] = g;
  return out;
}

TEST(DiffusionGemmaCli, Nvfp4WeightOnlyGenerationEqualsTransformersOnTheDequantizedWeights) {
  const json out = nvfp4_generate("tiny_w4a16_nvfp4");
  EXPECT_EQ(out["output_ids"], out["golden"]["output_ids"]);
}

TEST(DiffusionGemmaCli, Nvfp4W4A4Generates) {
  // The published release's format (NVFP4 W4A4, input_scale per module): two canvases of ids.
  const json out = nvfp4_generate("tiny_nvfp4");
  ASSERT_TRUE(out.contains("output_ids"));
  EXPECT_EQ(out["output_ids"].size(), out["golden"]["max_tokens"].get<size_t>());
  EXPECT_EQ(out["diffusion"]["canvases"], 2);
}

TEST(DiffusionGemmaCli, PlainOutputPrintsTheIdsOfEachBlock) {
  // Without --json and without a tokenizer: the ids, space-separated, as each block is accepted.
  const json c = case_named("two_canvases");
  const auto r = test::run_fp4lm("generate --model " + model() + " --prompt-ids " + id_list(c["prompt_ids"]) +
                                 " --max-tokens 16 --temperature 0 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string want;
  for (const json& t : c["output_ids"]) want += (want.empty() ? "" : " ") + std::to_string(t.get<int>());
  EXPECT_EQ(r.out, want + "\n");
}

TEST(DiffusionGemmaCli, TemperatureOneSamplesFromTheSeededStream) {
  // transformers' random rule (uniform canvas, a draw per position) from fp4lm's stream: not
  // torch's numbers, so no golden; the same seed repeats, other seeds move away from the
  // deterministic output.
  const json c = case_named("three_canvases_long_prompt");
  auto sample = [&](int seed) {
    return run_case(c, "--ignore-eos --seed " + std::to_string(seed), "1")["output_ids"];
  };
  const json a = sample(1), again = sample(1);
  ASSERT_EQ(a.size(), 24u);
  EXPECT_EQ(a, again);
  int differ = 0;
  for (int seed = 2; seed <= 4; ++seed) differ += sample(seed) != c["output_ids"];
  EXPECT_GE(differ + (a != c["output_ids"]), 3);
  for (const json& t : a) EXPECT_TRUE(t.get<int>() >= 0 && t.get<int>() < 96) << t;
}

TEST(DiffusionGemmaCli, StreamedTextEqualsTheWholeDecode) {
  // With a tokenizer (a byte-level one borrowed from the Gemma 4 VL fixture: ids below 96 are
  // single bytes) the text streams block by block, detokenized incrementally.
  test::TempDir d;
  const std::filesystem::path src = test::source_dir() / "tests/model/fixtures/diffusion_gemma/tiny";
  for (const auto& e : std::filesystem::directory_iterator(src))
    std::filesystem::copy_file(e.path(), d.path() / e.path().filename());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(test::source_dir() / "tests/model/fixtures/gemma4_vl" / f, d.path() / f);
  const json c = case_named("three_canvases_long_prompt");
  const std::string args = "generate --model " + d.path().string() + " --prompt-ids " + id_list(c["prompt_ids"]) +
                           " --max-tokens 24 --ignore-eos";
  const auto whole = test::run_fp4lm(args + " --json");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const json j = json::parse(whole.out);
  EXPECT_EQ(j["output_ids"], c["output_ids"]);
  std::string bytes;
  for (const json& t : c["output_ids"]) bytes += static_cast<char>(t.get<int>());
  EXPECT_EQ(j["text"], bytes);
  const auto streamed = test::run_fp4lm(args);
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  EXPECT_EQ(streamed.out, bytes + "\n");
}

// A copy of the fixture whose generation_config.json is edited by `edit`.
std::string with_generation_config(const test::TempDir& dir, const std::function<void(json&)>& edit) {
  const std::filesystem::path src = test::source_dir() / "tests/model/fixtures/diffusion_gemma/tiny";
  for (const auto& e : std::filesystem::directory_iterator(src))
    std::filesystem::copy_file(e.path(), dir.path() / e.path().filename());
  std::ifstream in(src / "generation_config.json");
  json g = json::parse(in);
  edit(g);
  test::write_file(dir.path() / "generation_config.json", g.dump(1));
  return dir.path().string();
}

TEST(DiffusionGemmaCli, GenerationConfigFieldsAreReadOrRefusedByName) {
  const std::string args = " --prompt-ids 2,30,9,42 --max-tokens 8 --json";
  {
    test::TempDir d;
    const auto r = test::run_fp4lm("generate --model " +
                                   with_generation_config(d, [](json& g) { g["diffusion_warmup"] = 3; }) + args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("unknown field 'diffusion_warmup'"), std::string::npos) << r.err;
  }
  {
    test::TempDir d;
    const auto r = test::run_fp4lm(
        "generate --model " + with_generation_config(d, [](json& g) { g["cache_implementation"] = "static"; }) + args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("'cache_implementation' \"static\" is not supported"), std::string::npos) << r.err;
  }
  {
    test::TempDir d;
    const auto r = test::run_fp4lm("generate --model " + with_generation_config(d, [](json& g) {
                                     g["sampler_config"]["_cls_name"] = "TopKSamplerConfig";
                                   }) + args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("'sampler_config._cls_name' \"TopKSamplerConfig\" is not supported"), std::string::npos)
        << r.err;
  }
  {
    // The schedule is read: one denoising step instead of six gives one decoder pass per canvas.
    test::TempDir d;
    const auto r = test::run_fp4lm(
        "generate --model " + with_generation_config(d, [](json& g) { g["max_denoising_steps"] = 1; }) + args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["diffusion"]["decoder_passes"], 1);
  }
}

}  // namespace
}  // namespace fp4lm::diffusion_gemma_cli_test
