// `fp4lm inspect`: the real shared models (human and --json), quantization summaries from both
// config locations, and broken checkpoints (one line on stderr, exit 1).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/paths.h"
#include "io/safetensors.h"

namespace fp4lm::inspect_cli_test {
namespace {

using nlohmann::json;
using test::TempDir;

test::CommandResult inspect(const std::string& dir, const std::string& extra = "") {
  return test::run_command(test::fp4lm_bin() + " inspect --model '" + dir + "' " + extra);
}

// The value of a "label      value" line of the human output ("" if absent).
std::string value_of(const std::string& out, const std::string& label) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(label, 0) != 0 || line.size() <= label.size() || line[label.size()] != ' ')
      continue;
    size_t v = line.find_first_not_of(' ', label.size());
    return v == std::string::npos ? "" : line.substr(v);
  }
  return "";
}

size_t count_lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

void write_checkpoint(const TempDir& d, const json& config) {
  test::write_file(d / "config.json", config.dump());
  io::SafetensorsWriter w;
  w.add("model.layers.0.mlp.down_proj.weight", DType::U8, {4, 8}, std::vector<uint8_t>(32));
  w.add("model.layers.0.mlp.down_proj.weight_scale", DType::F8_E4M3, {4, 1},
        std::vector<uint8_t>(4, 0x38));
  w.add("model.layers.0.mlp.down_proj.weight_scale_2", DType::F32, {}, std::vector<float>{1.0f});
  w.add("model.norm.weight", DType::BF16, {16}, std::vector<uint16_t>(16, 0x3f80));
  w.write((d / "model.safetensors").string());
}

TEST(InspectCli, Stories260kHuman) {
  FP4LM_REQUIRE_SHARED("models/stories260k");
  auto r = inspect((test::shared_dir() / "models/stories260k").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(value_of(r.out, "architecture"), "LlamaForCausalLM");
  EXPECT_EQ(value_of(r.out, "layers"), "5");
  EXPECT_EQ(value_of(r.out, "hidden size"), "64");
  EXPECT_EQ(value_of(r.out, "intermediate size"), "172");
  EXPECT_EQ(value_of(r.out, "attention heads"), "8");
  EXPECT_EQ(value_of(r.out, "kv heads"), "4");
  EXPECT_EQ(value_of(r.out, "vocab size"), "512");
  EXPECT_EQ(value_of(r.out, "torch dtype"), "float32");
  EXPECT_EQ(value_of(r.out, "quantization"), "none");
  EXPECT_EQ(value_of(r.out, "tensors"), "47");
  EXPECT_EQ(value_of(r.out, "  F32"), "47 tensors, 1040128 bytes (1015.8 KiB)");
  EXPECT_EQ(value_of(r.out, "total bytes"), "1040128 bytes (1015.8 KiB)");
}

TEST(InspectCli, Stories260kJson) {
  FP4LM_REQUIRE_SHARED("models/stories260k");
  auto r = inspect((test::shared_dir() / "models/stories260k").string(), "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["architecture"], "LlamaForCausalLM");
  EXPECT_EQ(j["num_layers"], 5);
  EXPECT_EQ(j["hidden_size"], 64);
  EXPECT_EQ(j["intermediate_size"], 172);
  EXPECT_EQ(j["num_attention_heads"], 8);
  EXPECT_EQ(j["num_key_value_heads"], 4);
  EXPECT_EQ(j["vocab_size"], 512);
  EXPECT_EQ(j["torch_dtype"], "float32");
  EXPECT_TRUE(j["quantization"].is_null());
  EXPECT_EQ(j["tensor_count"], 47);
  EXPECT_EQ(j["bytes_by_dtype"], json({{"F32", 1040128}}));
  EXPECT_EQ(j["tensors_by_dtype"], json({{"F32", 47}}));
  EXPECT_EQ(j["total_bytes"], 1040128);
}

TEST(InspectCli, TinyQwen3MoeJson) {
  FP4LM_REQUIRE_SHARED("models/tiny-qwen3-moe");
  auto r = inspect((test::shared_dir() / "models/tiny-qwen3-moe").string(), "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["architecture"], "Qwen3MoeForCausalLM");
  EXPECT_EQ(j["num_layers"], 4);
  EXPECT_EQ(j["moe_intermediate_size"], 64);
  EXPECT_EQ(j["num_experts"], 8);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  EXPECT_EQ(j["tensors_by_dtype"], json({{"BF16", 135}}));
  EXPECT_EQ(j["total_bytes"], 2239232);
}

TEST(InspectCli, QuantizationFromHfQuantConfig) {
  TempDir d;
  write_checkpoint(d, {{"architectures", {"Qwen3ForCausalLM"}}, {"num_hidden_layers", 1}});
  test::write_file(d / "hf_quant_config.json",
                   json({{"producer", {{"name", "modelopt"}, {"version", "0.29"}}},
                         {"quantization",
                          {{"quant_algo", "NVFP4"},
                           {"kv_cache_quant_algo", nullptr},
                           {"group_size", 16},
                           {"exclude_modules", {"lm_head", "model.layers.*.mlp.gate"}}}}})
                       .dump());
  auto r = inspect(d.path().string());
  // A partial checkpoint (no vocab_size): described, then refused with exit 1.
  ASSERT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("fp4lm cannot load it"), std::string::npos) << r.err;
  EXPECT_EQ(value_of(r.out, "quantization"), "NVFP4 (from hf_quant_config.json)");
  EXPECT_EQ(value_of(r.out, "  group size"), "16");
  EXPECT_EQ(value_of(r.out, "  kv cache"), "-");
  EXPECT_EQ(value_of(r.out, "  exclude"), "lm_head, model.layers.*.mlp.gate");
  EXPECT_EQ(value_of(r.out, "hidden size"), "-");  // absent from config.json
  EXPECT_EQ(value_of(r.out, "tensors"), "4");
  EXPECT_EQ(value_of(r.out, "  U8"), "1 tensors, 32 bytes");
  EXPECT_EQ(value_of(r.out, "  F8_E4M3"), "1 tensors, 4 bytes");

  r = inspect(d.path().string(), "--json");
  // A partial checkpoint (no vocab_size): described, then refused with exit 1.
  ASSERT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("fp4lm cannot load it"), std::string::npos) << r.err;
  json q = json::parse(r.out)["quantization"];
  EXPECT_EQ(q["quant_algo"], "NVFP4");
  EXPECT_EQ(q["group_size"], 16);
  EXPECT_TRUE(q["kv_cache_quant_algo"].is_null());
  EXPECT_EQ(q["exclude_modules"], json({"lm_head", "model.layers.*.mlp.gate"}));
  json j = json::parse(r.out);
  EXPECT_EQ(j["total_bytes"], 32 + 4 + 4 + 32);
  EXPECT_EQ(j["bytes_by_dtype"], json({{"U8", 32}, {"F8_E4M3", 4}, {"F32", 4}, {"BF16", 32}}));
}

TEST(InspectCli, QuantizationFromConfigJson) {
  TempDir d;
  write_checkpoint(d, {{"architectures", {"LlamaForCausalLM"}},
                       {"quantization_config",
                        {{"quant_method", "modelopt"},
                         {"quant_algo", "W4A16_NVFP4"},
                         {"kv_cache_quant_algo", "FP8"},
                         {"ignore", {"lm_head"}}}}});
  auto r = inspect(d.path().string(), "--json");
  // A partial checkpoint (no vocab_size): described, then refused with exit 1.
  ASSERT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("fp4lm cannot load it"), std::string::npos) << r.err;
  json q = json::parse(r.out)["quantization"];
  EXPECT_EQ(q["quant_algo"], "W4A16_NVFP4");
  EXPECT_EQ(q["kv_cache_quant_algo"], "FP8");
  EXPECT_EQ(q["exclude_modules"], json({"lm_head"}));
  EXPECT_EQ(q["source"], "config.json");
}

// ---------------------------------------------------------------- broken checkpoints

void expect_one_line_error(const std::string& dir, const std::string& must_contain) {
  auto r = inspect(dir);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("fp4lm: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(must_contain), std::string::npos) << r.err;
}

std::string raw(const std::string& header, size_t data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(data, '\0');
}

TEST(InspectCliBad, TruncatedSafetensors) {
  TempDir d;
  test::write_file(d / "config.json", "{}");
  test::write_file(d / "model.safetensors", std::string("\x08\x00", 2));
  expect_one_line_error(d.path().string(), (d / "model.safetensors").string() + ": file is 2 bytes");
}

TEST(InspectCliBad, SizeShapeMismatch) {
  TempDir d;
  test::write_file(d / "config.json", "{}");
  test::write_file(d / "model.safetensors",
                   raw(R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,4]}})", 4));
  expect_one_line_error(d.path().string(), "tensor 'w': data_offsets [0, 4] span 4 bytes");
}

TEST(InspectCliBad, ConfigNotAnObject) {
  TempDir d;
  test::write_file(d / "config.json", "\"llama\"");
  test::write_file(d / "model.safetensors", raw("{}", 0));
  expect_one_line_error(d.path().string(), "config.json: expected a JSON object, found string");
}

TEST(InspectCliBad, MissingShardAndDuplicateTensor) {
  TempDir d;
  test::write_file(d / "config.json", "{}");
  test::write_file(d / "a.safetensors",
                   raw(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1));
  test::write_file(d / "model.safetensors.index.json",
                   R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})");
  expect_one_line_error(d.path().string(), "shard 'b.safetensors' (listed for tensor 'y') does not exist");

  test::write_file(d / "b.safetensors",
                   raw(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("y":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                       2));
  expect_one_line_error(d.path().string(), "tensor 'x' is stored in two shards");
}

TEST(InspectCliBad, BadQuantConfig) {
  TempDir d;
  write_checkpoint(d, json::object());
  test::write_file(d / "hf_quant_config.json", R"({"producer": {}})");
  expect_one_line_error(d.path().string(), "hf_quant_config.json: missing the 'quantization' object");
}

TEST(InspectCliBad, MissingDirectoryAndMissingFlag) {
  TempDir d;
  expect_one_line_error((d / "nope").string(), "no such checkpoint directory");
  auto r = test::run_command(test::fp4lm_bin() + " inspect");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fp4lm::inspect_cli_test

namespace fp4lm::inspect_cli_test {
namespace {

// The RAM a run needs, before loading: the layers' weights and the KV cache per token. A
// DeepSeek-V3 replica's cache holds the MLA latent: (kv_lora_rank 32 + qk_rope_head_dim 8) values
// per layer per token (synth: head_dim 16), here 2 layers in bfloat16.
TEST(InspectCli, SaysTheRamNeededWithTheLatentKvCache) {
  TempDir d;
  auto s = test::run_command(test::fp4lm_bin() + " synth --arch DeepseekV3ForCausalLM --algo NVFP4 --layers 2 --out '" +
                             (d / "ds").string() + "'");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  auto r = inspect((d / "ds").string(), "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json m = json::parse(r.out)["memory"];
  EXPECT_EQ(m["kv_bytes_per_token"].get<size_t>(), 2u * (32 + 8) * 2);
  EXPECT_EQ(m["kv_dtype"], "bfloat16");
  EXPECT_GT(m["weights_bytes"].get<size_t>(), 0u);
  auto h = inspect((d / "ds").string());
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_NE(value_of(h.out, "RAM needed").find("+ KV cache 160 bytes per token (bfloat16)"), std::string::npos)
      << h.out;
}

// A gpt-oss replica with MXFP4 experts (fp4lm synth --mxfp4-experts): inspect names the mxfp4
// family, the experts' MXFP4 format and the W4A16 backend that runs them; everything else unquantized.
TEST(InspectCli, GptOssMxfp4Experts) {
  TempDir d;
  auto s = test::run_command(test::fp4lm_bin() + " synth --arch GptOssForCausalLM --algo none --mxfp4-experts --out '" +
                             (d / "oss").string() + "'");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  auto r = inspect((d / "oss").string(), "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["quantization"]["family"], "mxfp4");
  for (const json& l : j["layers"]) {
    const bool experts = l["kind"] == "moe";
    EXPECT_EQ(l["format"], experts ? "mxfp4 MXFP4" : "unquantized") << l["name"];
    EXPECT_EQ(l["scheme"], experts ? "mxfp4_w4a16" : "unquantized") << l["name"];
  }
  auto h = inspect((d / "oss").string());
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_EQ(value_of(h.out, "  config family"), "mxfp4") << h.out;
}

}  // namespace
}  // namespace fp4lm::inspect_cli_test

namespace fp4lm::inspect_cli_test {
namespace {

// The RAM inspect reports per sequence is the model's own state layout (the layers' declared
// K/V and recurrent slots; tests/model/state_bytes_test.cpp checks the same numbers against
// what the engine reserves): Nemotron-H counts only its attention layer per token and its Mamba-2
// state once, Gemma 4 its global layer's head size, its sliding ring once and its shared layers
// not at all, DeepSeek-V3 its latent, a dense model every layer.
TEST(InspectCli, SequenceBytesAreTheModelsStateLayout) {
  struct Case {
    const char* arch;
    const char* flags;
    size_t per_token, fixed;
  };
  // Synthetic defaults (kv_heads 2, head_dim 16, bfloat16); inspect loads with prefill chunk 256.
  const Case cases[] = {
      {"Qwen3ForCausalLM", "--layers 2", 2 * 2 * 2 * 16 * 2, 0},
      {"NemotronHForCausalLM", "--layers 4", 2 * 2 * 16 * 2, 2 * (3 * 96 + 4 * 8 * 16) * 2 * 4},
      {"Gemma4ForCausalLM", "--layers 4 --kv-shared-layers 2", 2 * 1 * 32 * 2, 2 * 2 * 16 * (8 - 1 + 256) * 2},
      {"DeepseekV3ForCausalLM", "--layers 2", 2 * (32 + 8) * 2, 0},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.arch);
    TempDir d;
    auto s = test::run_command(test::fp4lm_bin() + " synth --arch " + k.arch + " --algo none " + k.flags +
                               " --out '" + (d / "m").string() + "'");
    ASSERT_EQ(s.exit_code, 0) << s.err;
    auto r = inspect((d / "m").string(), "--json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json m = json::parse(r.out)["memory"];
    EXPECT_EQ(m["kv_bytes_per_token"].get<size_t>(), k.per_token) << m.dump();
    EXPECT_EQ(m["state_fixed_bytes"].get<size_t>(), k.fixed) << m.dump();
    const size_t ctx = m["default_context"].get<size_t>();
    EXPECT_EQ(ctx, 512u);  // the synthetic max_position_embeddings
    EXPECT_EQ(m["sequence_bytes_at_default_context"].get<size_t>(), k.fixed + ctx * k.per_token) << m.dump();
    EXPECT_EQ(m["total_at_default_context_bytes"].get<size_t>(),
              m["weights_bytes"].get<size_t>() + k.fixed + ctx * k.per_token);
  }
}

// inspect reports the model's per-layer attention table (model/attention_table.h): Gemma 4's
// synthetic layers sliding (window 8, 2 KV heads of 16), full (1 global KV head of 32), and the
// last two reading the K/V of layers 0 and 1; the human form sums it up by kind.
TEST(InspectCli, ReportsTheAttentionTable) {
  TempDir d;
  auto s = test::run_command(test::fp4lm_bin() + " synth --arch Gemma4ForCausalLM --algo none --layers 4 "
                             "--kv-shared-layers 2 --out '" + (d / "m").string() + "'");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  auto r = inspect((d / "m").string(), "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json a = json::parse(r.out)["attention"];
  ASSERT_EQ(a.size(), 4u) << a.dump();
  for (size_t i = 0; i < 4; ++i) {
    const bool sliding = i % 2 == 0;
    EXPECT_EQ(a[i]["kind"], sliding ? "sliding" : "full") << i;
    EXPECT_EQ(a[i]["window"], sliding ? 8 : 0) << i;
    EXPECT_EQ(a[i]["head_dim"], sliding ? 16 : 32) << i;
    EXPECT_EQ(a[i]["kv_heads"], sliding ? 2 : 1) << i;
    EXPECT_EQ(a[i]["kv_source"], i < 2 ? -1 : static_cast<int>(i) - 2) << i;
  }
  auto h = inspect((d / "m").string(), "");
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_NE(h.out.find("1 sliding 8 (head_dim 16, 2 KV heads), 1 full (head_dim 32, 1 KV heads), 1 sliding 8 "
                       "(head_dim 16, 2 KV heads, shared K/V), 1 full (head_dim 32, 1 KV heads, shared K/V)"),
            std::string::npos)
      << h.out;
}

// DeepSeek-V4 (its transformers-built fixture, bfloat16): a token adds only its share of the
// compressed entries — per CSA layer head_dim 32 / 4 + index_head_dim 16 / 4, on the HCA layer
// 32 / 16: 26 values, 52 bytes (its layers' inputs took 4 × 32 × 2); the rings (window 8 on four
// layers, each compressor's rows) are fixed: with prefill chunk 256, 4 · 263 · 32 + 2 · 263 ·
// (128 + 64) + 271 · 64 values. At the 256-position context each ring is capped at 256 rows.
TEST(InspectCli, DeepseekV4SequenceBytesAreItsBoundedCaches) {
  auto r = inspect((test::source_dir() / "tests/model/fixtures/deepseek_v4").string(), "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json m = json::parse(r.out)["memory"];
  EXPECT_EQ(m["kv_dtype"], "bfloat16") << m.dump();
  EXPECT_EQ(m["kv_bytes_per_token"].get<size_t>(), 52u) << m.dump();
  EXPECT_EQ(m["state_fixed_bytes"].get<size_t>(), (4u * 263 * 32 + 2 * 263 * 192 + 271 * 64) * 2) << m.dump();
  EXPECT_EQ(m["default_context"].get<size_t>(), 256u);
  EXPECT_EQ(m["sequence_bytes_at_default_context"].get<size_t>(),
            (4u * 256 * 32 + 2 * 256 * 192 + 256 * 64 + 2 * 64 * 48 + 16 * 32) * 2)
      << m.dump();
}

}  // namespace
}  // namespace fp4lm::inspect_cli_test
