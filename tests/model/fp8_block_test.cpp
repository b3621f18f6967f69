// Block-wise FP8 checkpoints (docs/FORMAT.md §10): DeepSeek / Qwen's quant_method "fp8" with
// weight_block_size (`weight_scale_inv`) and compressed-tensors' FP8_BLOCK (`weight_scale`),
// derived here from a ModelOpt FP8 checkpoint by giving each weight a grid of block scales.
//  - a uniform power-of-two grid holds the numbers of the per-tensor checkpoint with that scale:
//    bit-identical logits (both families, dense and MoE);
//  - a varied grid matches the same weights dequantized into an unquantized float32 checkpoint
//    (an independent path: the dense kernels) within fp32 summation error, and the forced
//    `reference` backend's W8A8 emulation (per-token-group activations) stays near it;
//  - a replica of Qwen3-30B-A3B-FP8's published quantization_config loads and generates;
//  - every malformed config or tensor is an Error naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/checkpoint_edit.h"
#include "common/error_of.h"
#include "common/paths.h"
#include "io/json_file.h"
#include "kernels/registry.h"
#include "model/causal_lm.h"
#include "model/load/model_loader.h"
#include "reference/logits_check.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::fp8_block_test {
namespace {

using nlohmann::json;
using quant::QuantAlgo;
using quant::Scheme;
using test::TempDir;
namespace fs = std::filesystem;

const std::vector<int32_t> kTokens = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77};

std::vector<float> logits_of(const std::string& dir, EngineOptions o = {}) {
  return checkpoint_logits(dir, kTokens, o);
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (a[i] - b[i]) * (a[i] - b[i]), n += b[i] * b[i];
  return std::sqrt(d / n);
}

void set_quantization_config(const fs::path& dir, const json& qc) {
  json c = io::read_json_file((dir / "config.json").string());
  if (qc.is_null()) c.erase("quantization_config");
  else c["quantization_config"] = qc;
  std::ofstream(dir / "config.json") << c.dump(2);
}

float read_f32(const std::vector<uint8_t>& b) {
  float v;
  std::memcpy(&v, b.data(), 4);
  return v;
}

// A ModelOpt FP8 checkpoint (per-tensor scales, no input_scale: W8A16) with each weight_scale
// rounded to a power of two, so the same numbers can be written as a uniform block grid.
std::string write_modelopt_fp8(const TempDir& dir, const std::string& arch) {
  const std::string d = (dir.path() / "modelopt").string();
  synth::SyntheticOptions s;
  s.architecture = arch;
  s.algo = QuantAlgo::FP8;
  s.seed = 5;
  synth::write_synthetic_checkpoint(d, s);
  test::edit_tensors(d, [](test::EditedTensor& t) {
    if (t.name.find("input_scale") != std::string::npos) return false;
    if (t.name.size() > 13 && t.name.compare(t.name.size() - 13, 13, ".weight_scale") == 0) {
      const float p = std::exp2(std::round(std::log2(read_f32(t.bytes))));
      std::memcpy(t.bytes.data(), &p, 4);
    }
    return true;
  });
  return d;
}

// Grid value of block (g, c) of module m whose per-tensor scale is s.
using GridScale = std::function<float(const std::string& m, int64_t g, int64_t c, float s)>;

struct BlockForm {
  std::string scale_name = "weight_scale_inv";  // compressed-tensors: "weight_scale"
  int64_t bn = 16, bk = 32;
  DType scale_dtype = DType::F32;
};

// The ModelOpt FP8 checkpoint `from` rewritten in block form: every F8_E4M3 weight keeps its
// codes and gets a [ceil(N/bn), ceil(K/bk)] grid (`grid`), config.json's quantization_config
// `qc`, no hf_quant_config.json.
std::string write_block_form(const std::string& from, const fs::path& to, const BlockForm& f, const json& qc,
                             const GridScale& grid) {
  test::copy_dir(from, to);
  fs::remove(to / "hf_quant_config.json");
  auto src = io::Checkpoint::open(from);
  test::edit_tensors(to, [&](test::EditedTensor& t) {
    const std::string suffix = ".weight_scale";
    if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      return true;
    const std::string m = t.name.substr(0, t.name.size() - suffix.size());
    const TensorView* w = src->find(m + ".weight");
    const int64_t n = w->shape[0], k = w->shape[1], gr = (n + f.bn - 1) / f.bn, gc = (k + f.bk - 1) / f.bk;
    const float s = read_f32(t.bytes);
    std::vector<float> v;
    for (int64_t g = 0; g < gr; ++g)
      for (int64_t c = 0; c < gc; ++c) v.push_back(grid(m, g, c, s));
    t.name = m + "." + f.scale_name;
    t.shape = {gr, gc};
    t.dtype = f.scale_dtype;
    t.bytes.assign(v.size() * dtype_size(f.scale_dtype), 0);
    from_f32_n(v.data(), f.scale_dtype, t.bytes.data(), v.size());
    return true;
  });
  set_quantization_config(to, qc);
  return to.string();
}

json deepseek_config(int64_t bn, int64_t bk) {
  return {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"}, {"weight_block_size", {bn, bk}}};
}

json ct_block_config(int64_t bn, int64_t bk, bool w8a8) {
  json g = {{"targets", {"Linear"}},
            {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", "block"}, {"symmetric", true},
                         {"dynamic", false}, {"block_structure", {bn, bk}}}},
            {"input_activations", nullptr},
            {"format", "float-quantized"}};
  if (w8a8)
    g["input_activations"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "group"}, {"group_size", bk},
                              {"symmetric", true}, {"dynamic", true}};
  return {{"quant_method", "compressed-tensors"}, {"format", "float-quantized"}, {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", g}}}, {"ignore", {"lm_head", "re:.*mlp\\.gate$"}}, {"kv_cache_scheme", nullptr}};
}

bool have_fast_fp8() {
  return kernels::select_linear({kernels::kFp8BlockW8A16, DType::F32, 64, 64, {}}, "x").backend->name != "reference";
}

class BlockFp8 : public ::testing::TestWithParam<const char*> {};

TEST_P(BlockFp8, UniformPowerOfTwoGridIsBitIdenticalToPerTensorFp8InBothFamilies) {
  TempDir dir;
  const std::string mo = write_modelopt_fp8(dir, GetParam());
  const GridScale same = [](const std::string&, int64_t, int64_t, float s) { return s; };
  const std::string ds = write_block_form(mo, dir.path() / "deepseek", {}, deepseek_config(16, 32), same);
  const std::string ct = write_block_form(mo, dir.path() / "ct", {"weight_scale", 16, 32, DType::BF16},
                                          ct_block_config(16, 32, true), same);

  ModelLoader l(io::Checkpoint::open(ds), {});
  const LayerSpec& qkv = l.layer("model.layers.0.self_attn.qkv_proj");
  const LayerReport r = l.describe(qkv);
  EXPECT_EQ(r.scheme.on_disk, (quant::DiskFormat{quant::Family::fine_grained_fp8, Scheme::fp8_block, 16, 32}));
  EXPECT_EQ(r.scheme.key, kernels::kFp8Block);
  EXPECT_EQ(l.describe(l.layer("lm_head")).scheme.key, kernels::kUnquantized);  // stored in bf16
  ModelLoader lc(io::Checkpoint::open(ct), {});
  EXPECT_EQ(lc.describe(lc.layer("model.layers.0.self_attn.qkv_proj")).scheme.on_disk,
            (quant::DiskFormat{quant::Family::compressed_tensors, Scheme::fp8_block, 16, 32}));
  if (!have_fast_fp8()) GTEST_SKIP() << "no FP8 W8A16 backend on this CPU: reference emulates W8A8";
  EXPECT_NE(r.selection.backend->name, "reference");
  const std::vector<float> base = logits_of(mo);
  EXPECT_TRUE(bit_identical(base, logits_of(ds)));
  EXPECT_TRUE(bit_identical(base, logits_of(ct)));
  // compressed-tensors' W8A16 block group: the same.
  set_quantization_config(ct, ct_block_config(16, 32, false));
  ModelLoader la(io::Checkpoint::open(ct), {});
  EXPECT_EQ(la.describe(la.layer("model.layers.0.self_attn.qkv_proj")).scheme.key, kernels::kFp8BlockW8A16);
  EXPECT_TRUE(bit_identical(base, logits_of(ct)));
}

TEST_P(BlockFp8, VariedGridMatchesTheDequantizedWeightsAndReferenceW8A8StaysNear) {
  TempDir dir;
  const std::string mo = write_modelopt_fp8(dir, GetParam());
  // Scales that differ per block (and not by powers of two only).
  const GridScale varied = [](const std::string& m, int64_t g, int64_t c, float s) {
    return s * (0.6f + 0.15f * static_cast<float>((g * 3 + c * 5 + static_cast<int64_t>(m.size())) % 7));
  };
  const BlockForm f;
  const std::string ds = write_block_form(mo, dir.path() / "deepseek", f, deepseek_config(f.bn, f.bk), varied);
  // The same numbers as an unquantized float32 checkpoint: weight = e4m3(code) × its block's scale.
  const fs::path dq = dir.path() / "dequantized";
  test::copy_dir(ds, dq);
  auto blk = io::Checkpoint::open(ds);
  test::edit_tensors(dq, [&](test::EditedTensor& t) {
    if (t.name.find("weight_scale_inv") != std::string::npos) return false;
    if (t.dtype != DType::F8_E4M3) return true;
    const std::string m = t.name.substr(0, t.name.size() - 7);
    const TensorView* sc = blk->find(m + ".weight_scale_inv");
    const int64_t n = t.shape[0], k = t.shape[1], gc = sc->shape[1];
    std::vector<float> grid(static_cast<size_t>(sc->shape[0] * gc));
    to_f32_n(sc->data, sc->dtype, grid.data(), grid.size());
    std::vector<float> v(static_cast<size_t>(n * k));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) v[r * k + j] = e4m3_to_f32(t.bytes[r * k + j]) * grid[(r / f.bn) * gc + j / f.bk];
    t.dtype = DType::F32;
    t.bytes.resize(v.size() * 4);
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    return true;
  });
  set_quantization_config(dq, nullptr);
  const std::vector<float> want = logits_of(dq.string()), got = logits_of(ds);
  EXPECT_LT(rel_diff(got, want), 1e-5);
  EXPECT_FALSE(bit_identical(logits_of(mo), got));  // the grid changed the numbers
  // Forced reference: W8A8 as stored (activations quantized per token per 32): near, not equal.
  EngineOptions o;
  o.linear_backend = "reference";
  o.moe_backend = "reference";
  const std::vector<float> w8a8 = logits_of(ds, o);
  const double d = rel_diff(w8a8, want);
  EXPECT_GT(d, 1e-6);
  EXPECT_LT(d, 0.1);
}

INSTANTIATE_TEST_SUITE_P(Archs, BlockFp8, ::testing::Values("LlamaForCausalLM", "Qwen3MoeForCausalLM"));

// Qwen3-30B-A3B-FP8's quantization_config as published (the norms, routers and lm_head listed
// as not converted; they are stored in bf16), on a tiny Qwen3-MoE with 128x128 blocks (one
// partial block per tensor at these sizes): loads, runs block FP8 everywhere it is stored,
// generates greedily the same tokens as the per-tensor form of the same numbers.
TEST(BlockFp8Published, Qwen3MoeFp8ReplicaLoadsAndGenerates) {
  TempDir dir;
  const std::string mo = write_modelopt_fp8(dir, "Qwen3MoeForCausalLM");
  json not_converted = {"lm_head"};
  for (int i = 0; i < 2; ++i)
    for (const char* m : {"input_layernorm", "mlp.gate", "post_attention_layernorm"})
      not_converted.push_back(fmt::format("model.layers.{}.{}", i, m));
  json qc = {{"activation_scheme", "dynamic"}, {"modules_to_not_convert", not_converted}, {"fmt", "e4m3"},
             {"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  const std::string ds = write_block_form(mo, dir.path() / "qwen3-fp8", {"weight_scale_inv", 128, 128}, qc,
                                          [](const std::string&, int64_t, int64_t, float s) { return s; });
  ModelLoader l(io::Checkpoint::open(ds), {});
  for (const LayerSpec& spec : l.layers()) {
    const LayerReport r = l.describe(spec);
    const bool quantized = !spec.router && spec.name != "lm_head";
    EXPECT_EQ(r.scheme.on_disk.scheme, quantized ? Scheme::fp8_block : Scheme::unquantized) << spec.name;
  }
  if (!have_fast_fp8()) GTEST_SKIP() << "no FP8 W8A16 backend on this CPU";
  auto gen = [](const std::string& d) {  // greedy, 8 tokens
    EngineOptions o;
    o.dtype = "float32";
    auto lm = CausalLM::load(d, o);
    SequenceState state = lm->new_sequence();
    std::vector<int32_t> next = {1, 200, 17, 5}, out;
    std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
    while (out.size() < 8) {
      lm->forward(state, next.data(), static_cast<int64_t>(next.size()), LogitsMode::last, logits.data());
      const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      out.push_back(t);
      next = {t};
    }
    return out;
  };
  const std::vector<int32_t> a = gen(ds), b = gen(mo);
  EXPECT_EQ(a.size(), 8u);
  EXPECT_EQ(a, b);
}

TEST(BlockFp8Bad, ConfigsAndTensorsNameWhatIsWrong) {
  TempDir dir;
  const std::string mo = write_modelopt_fp8(dir, "LlamaForCausalLM");
  const GridScale same = [](const std::string&, int64_t, int64_t, float s) { return s; };
  const std::string ds = write_block_form(mo, dir.path() / "ds", {}, deepseek_config(16, 32), same);
  auto load_error = [](const std::string& d) { return test::error_of([&] { CausalLM::load(d, {}); }); };
  auto with_qc = [&](const json& qc) {
    set_quantization_config(ds, qc);
    return load_error(ds);
  };
  json qc = deepseek_config(16, 32);
  qc.erase("weight_block_size");
  EXPECT_NE(with_qc(qc).find("quant_method fp8 without weight_block_size"), std::string::npos);
  qc["weight_block_size"] = {128};
  EXPECT_NE(with_qc(qc).find("weight_block_size must be two positive integers [rows, columns], found [128]"),
            std::string::npos);
  qc = deepseek_config(16, 32);
  qc["activation_scheme"] = "static";
  EXPECT_NE(with_qc(qc).find("activation_scheme \"static\""), std::string::npos);
  qc = deepseek_config(16, 32);
  qc["fmt"] = "e5m2";
  EXPECT_NE(with_qc(qc).find("fmt 'e5m2'"), std::string::npos);
  // A grid of the wrong shape for the config's block size names the tensor, expected and found.
  std::string e = with_qc(deepseek_config(32, 32));
  EXPECT_NE(e.find("model.layers.0.self_attn.q_proj.weight_scale_inv"), std::string::npos) << e;
  EXPECT_NE(e.find("[2, 2]"), std::string::npos) << e;
  set_quantization_config(ds, deepseek_config(16, 32));
  // A missing grid, and a non-positive scale.
  TempDir d2;
  test::copy_dir(ds, d2.path());
  test::edit_tensors(d2.path(), [](test::EditedTensor& t) { return t.name != "model.layers.1.mlp.down_proj.weight_scale_inv"; });
  e = load_error(d2.path().string());
  EXPECT_NE(e.find("model.layers.1.mlp.down_proj.weight_scale_inv"), std::string::npos) << e;
  TempDir d3;
  test::copy_dir(ds, d3.path());
  test::edit_tensors(d3.path(), [](test::EditedTensor& t) {
    if (t.name == "model.layers.1.mlp.down_proj.weight_scale_inv") {
      const float z = -1.0f;
      std::memcpy(t.bytes.data() + 4, &z, 4);
    }
    return true;
  });
  e = load_error(d3.path().string());
  EXPECT_NE(e.find("block scale [0, 1] must be finite and positive, found -1"), std::string::npos) << e;
  // ModelOpt's hf_quant_config.json beside it: which one describes the tensors is unknown.
  fs::copy_file(fs::path(mo) / "hf_quant_config.json", fs::path(ds) / "hf_quant_config.json");
  EXPECT_NE(load_error(ds).find("quant_method is fp8 but"), std::string::npos);
}

}  // namespace
}  // namespace fp4lm::model::fp8_block_test
