// int4 checkpoints from the other producers (docs/FORMAT.md, "int4"): GPTQ (v1 and v2 zero points,
// desc_act with g_idx, sym and asym, per channel), AutoAWQ GEMM and compressed-tensors
// pack-quantized (symmetric and with zero points, actorder group), written by the test's own
// packing (tests/common/int4_checkpoint_writer.h), give float32 logits within 1e-4 of the range of
// a dense checkpoint holding the dequantized weights, and the same greedy tokens; replicas of
// published configs load; every bad input is an Error naming the tensor or key.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/checkpoint_edit.h"
#include "common/error_of.h"
#include "common/int4_checkpoint_writer.h"
#include "common/paths.h"
#include "model/causal_lm.h"
#include "model/load/model_loader.h"
#include "reference/logits_check.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::int4_checkpoints_test {
namespace {

using nlohmann::json;
using test::Int4Producer;
using test::TempDir;
namespace fs = std::filesystem;

const std::vector<int32_t> kTokens = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77, 12, 90};

// A dense float32 Llama whose Linear widths (128, 256; rows 64 to 256) take groups of 32, 64, 128.
std::string write_dense(const TempDir& dir, const std::string& arch = "LlamaForCausalLM") {
  synth::SyntheticOptions s;
  s.architecture = arch;
  s.algo = quant::QuantAlgo::None;
  s.dense_dtype = DType::F32;
  s.hidden = 128;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 32;
  s.intermediate = 256;
  s.seed = 5;
  const std::string d = (dir.path() / "dense").string();
  synth::write_synthetic_checkpoint(d, s);
  return d;
}

json gptq_config(int64_t group, bool desc_act, bool sym, const char* format) {
  return {{"quant_method", "gptq"}, {"bits", 4},   {"group_size", group},      {"desc_act", desc_act},
          {"sym", sym},             {"damp_percent", 0.01}, {"true_sequential", true}, {"checkpoint_format", format}};
}
json awq_config(int64_t group) {
  return {{"quant_method", "awq"}, {"bits", 4}, {"group_size", group}, {"zero_point", true}, {"version", "gemm"},
          {"modules_to_not_convert", nullptr}};
}
json ct_config(int64_t group, bool sym, bool act_order) {
  json w = {{"num_bits", 4}, {"type", "int"}, {"symmetric", sym}, {"dynamic", false}, {"observer", "minmax"},
            {"strategy", group ? "group" : "channel"}, {"group_size", group ? json(group) : json(nullptr)},
            {"actorder", act_order ? json("group") : json(nullptr)}, {"block_structure", nullptr}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", w}, {"input_activations", nullptr},
                                          {"output_activations", nullptr}, {"format", "pack-quantized"}}}}},
          {"ignore", {"lm_head"}},
          {"kv_cache_scheme", nullptr}};
}

json modelopt_config(int64_t group, bool pqs) {
  return {{"quant_method", "modelopt"}, {"quant_algo", "W4A16_AWQ"}, {"group_size", group},
          {"has_zero_point", false},    {"pre_quant_scale", pqs},    {"exclude_modules", {"lm_head"}},
          {"kv_cache_quant_algo", nullptr}};
}

struct Written {
  std::string deq, int4;
};
Written write_pair(const TempDir& dir, const test::Int4WriteOptions& o, const std::string& arch = "LlamaForCausalLM") {
  const std::string dense = write_dense(dir, arch);
  Written w{(dir.path() / "deq").string(), (dir.path() / "int4").string()};
  test::write_int4_pair(dense, w.deq, w.int4, o);
  return w;
}

std::vector<int32_t> argmax_rows(const std::vector<float>& logits, int64_t vocab) {
  std::vector<int32_t> out;
  for (size_t r = 0; r * vocab < logits.size(); ++r)
    out.push_back(static_cast<int32_t>(std::max_element(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab) -
                                       (logits.begin() + r * vocab)));
  return out;
}

// Greedy continuation of kTokens, n tokens.
std::vector<int32_t> greedy(const std::string& dir, int n) {
  EngineOptions o;
  o.dtype = "float32";
  auto lm = CausalLM::load(dir, o);
  SequenceState s = lm->new_sequence();
  std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
  lm->forward(s, kTokens.data(), static_cast<int64_t>(kTokens.size()), LogitsMode::last, logits.data());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    lm->forward(s, &t, 1, LogitsMode::last, logits.data());
  }
  return out;
}

// The int4 checkpoint's float32 logits are the dequantized dense checkpoint's within 1e-4 of the
// range, every position's argmax and a greedy continuation agree, and its Linear layers run int4.
void expect_matches_dequantized(const Written& w) {
  ModelLoader l(io::Checkpoint::open(w.int4), {});
  const LayerSpec& q = l.layers().front();
  EXPECT_EQ(l.describe(q).scheme.key, kernels::kInt4W4A16) << q.name;
  EXPECT_EQ(l.describe(q).scheme.on_disk.scheme, quant::Scheme::int4);
  const std::vector<float> a = checkpoint_logits(w.int4, kTokens), b = checkpoint_logits(w.deq, kTokens);
  ASSERT_EQ(a.size(), b.size());
  double diff = 0, range = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    range = std::max(range, std::fabs(static_cast<double>(b[i])));
  }
  EXPECT_LE(diff, 1e-4 * range) << "max |diff| " << diff << ", range " << range;
  EXPECT_GT(range, 0.0);
  EXPECT_EQ(argmax_rows(a, 256), argmax_rows(b, 256));
  EXPECT_EQ(greedy(w.int4, 6), greedy(w.deq, 6));
}

struct Case {
  const char* name;
  test::Int4WriteOptions o;
};

std::vector<Case> cases() {
  auto c = [](const char* name, Int4Producer p, int64_t group, bool sym, bool act, bool v1, json qc) {
    test::Int4WriteOptions o;
    o.producer = p, o.group = group, o.symmetric = sym, o.act_order = act, o.gptq_v1 = v1, o.quantization_config = qc;
    o.seed = static_cast<uint32_t>(group + 7 * sym + 13 * act + 29 * v1);
    return Case{name, o};
  };
  std::vector<Case> out = {
      c("gptq_v1_sym_g128", Int4Producer::gptq, 128, true, false, true, gptq_config(128, false, true, "gptq")),
      c("gptq_v1_asym_g32_desc_act", Int4Producer::gptq, 32, false, true, true, gptq_config(32, true, false, "gptq")),
      c("gptq_v2_asym_g64", Int4Producer::gptq, 64, false, false, false, gptq_config(64, false, false, "gptq_v2")),
      c("gptq_v2_sym_per_channel_desc_act", Int4Producer::gptq, 0, true, false, false,
        gptq_config(-1, true, true, "gptq_v2")),
      c("awq_g128", Int4Producer::awq, 128, false, false, false, awq_config(128)),
      c("awq_g32", Int4Producer::awq, 32, false, false, false, awq_config(32)),
      c("ct_sym_g128", Int4Producer::compressed_tensors, 128, true, false, false, ct_config(128, true, false)),
      c("ct_asym_g32_actorder", Int4Producer::compressed_tensors, 32, false, true, false, ct_config(32, false, true)),
      c("ct_asym_per_channel", Int4Producer::compressed_tensors, 0, false, false, false, ct_config(0, false, false)),
      c("ct_sym_g64_actorder", Int4Producer::compressed_tensors, 64, true, true, false, ct_config(64, true, true)),
      c("modelopt_w4a16_awq_g128", Int4Producer::modelopt, 128, true, false, false, modelopt_config(128, false)),
      c("modelopt_w4a16_awq_g64_pre_quant_scale", Int4Producer::modelopt, 64, true, false, false,
        modelopt_config(64, true)),
  };
  out.back().o.pre_quant_scale = true;
  return out;
}

class Int4Checkpoint : public ::testing::TestWithParam<Case> {};

TEST_P(Int4Checkpoint, LogitsAndGreedyTokensMatchTheDequantizedDenseCheckpoint) {
  TempDir dir;
  expect_matches_dequantized(write_pair(dir, GetParam().o));
}

INSTANTIATE_TEST_SUITE_P(Producers, Int4Checkpoint, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// A MoE model whose experts (moe_intermediate 32) are GPTQ int4 with act-order: the grouped MoE
// kernels run int4 experts.
TEST(Int4Moe, GptqExpertsMatchTheDequantizedDenseCheckpoint) {
  TempDir dir;
  test::Int4WriteOptions o = cases()[1].o;  // v1, asym, group 32, desc_act
  const Written w = write_pair(dir, o, "Qwen3MoeForCausalLM");
  ModelLoader l(io::Checkpoint::open(w.int4), {});
  bool moe = false;
  for (const LayerSpec& s : l.layers())
    if (s.kind == kernels::LayerKind::moe) {
      moe = true;
      EXPECT_EQ(l.describe(s).scheme.key, kernels::kInt4W4A16) << s.name;
    }
  EXPECT_TRUE(moe);
  expect_matches_dequantized(w);
}

// Published quantization_configs, verbatim but for the group size where noted, on the tiny model.
TEST(Int4Published, ReplicasOfPublishedConfigsLoadAndMatch) {
  struct Replica {
    const char* what;
    Int4Producer producer;
    bool sym, act_order, v1;
    int64_t group;
    json qc;
  };
  const std::vector<Replica> replicas = {
      // Qwen/Qwen2.5-7B-Instruct-AWQ (AutoAWQ).
      {"Qwen2.5-7B-Instruct-AWQ", Int4Producer::awq, false, false, false, 128,
       json::parse(R"({"bits": 4, "group_size": 128, "modules_to_not_convert": null, "quant_method": "awq",
                       "version": "gemm", "zero_point": true})")},
      // TheBloke/Llama-2-7B-GPTQ, branch gptq-4bit-32g-actorder_True (AutoGPTQ, desc_act).
      {"Llama-2-7B-GPTQ 4bit-32g-actorder", Int4Producer::gptq, true, true, true, 32,
       json::parse(R"({"bits": 4, "group_size": 32, "damp_percent": 0.1, "desc_act": true, "sym": true,
                       "true_sequential": true, "model_name_or_path": null, "model_file_base_name": "model",
                       "quant_method": "gptq"})")},
      // Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4 (transformers' GPTQConfig form).
      {"Qwen2.5-7B-Instruct-GPTQ-Int4", Int4Producer::gptq, true, false, true, 128,
       json::parse(R"({"batch_size": 1, "bits": 4, "block_name_to_quantize": null, "cache_block_outputs": true,
                       "damp_percent": 0.01, "dataset": null, "desc_act": false, "exllama_config": {"version": 1},
                       "group_size": 128, "max_input_length": null, "model_seqlen": null,
                       "module_name_preceding_first_block": null, "modules_in_block_to_quantize": null,
                       "pad_token_id": null, "quant_method": "gptq", "sym": true, "tokenizer": null,
                       "true_sequential": true, "use_cuda_fp16": false, "use_exllama": true})")},
      // GPTQModel's export (meta, pack_dtype, checkpoint_format).
      {"GPTQModel", Int4Producer::gptq, true, true, true, 128,
       json::parse(R"({"bits": 4, "dynamic": null, "group_size": 128, "desc_act": true, "sym": true,
                       "lm_head": false, "quant_method": "gptq", "checkpoint_format": "gptq", "pack_dtype": "int32",
                       "meta": {"quantizer": ["gptqmodel:2.2.0"], "uri": "https://github.com/modelcloud/gptqmodel",
                                "damp_percent": 0.01, "damp_auto_increment": 0.0025, "static_groups": false,
                                "true_sequential": true, "mse": 0.0}})")},
      // RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16 (llm-compressor).
      {"Meta-Llama-3.1-8B-Instruct-quantized.w4a16", Int4Producer::compressed_tensors, true, false, false, 128,
       json::parse(R"({"config_groups": {"group_0": {"input_activations": null, "output_activations": null,
                       "targets": ["Linear"], "weights": {"actorder": null, "block_structure": null, "dynamic": false,
                       "group_size": 128, "num_bits": 4, "observer": "minmax", "observer_kwargs": {},
                       "strategy": "group", "symmetric": true, "type": "int"}}}, "format": "pack-quantized",
                       "global_compression_ratio": 1.89, "ignore": ["lm_head"], "kv_cache_scheme": null,
                       "quant_method": "compressed-tensors", "quantization_status": "compressed"})")},
  };
  for (const Replica& r : replicas) {
    SCOPED_TRACE(r.what);
    TempDir dir;
    test::Int4WriteOptions o;
    o.producer = r.producer, o.symmetric = r.sym, o.act_order = r.act_order, o.gptq_v1 = r.v1, o.group = r.group;
    o.quantization_config = r.qc;
    expect_matches_dequantized(write_pair(dir, o));
  }
}

std::string load_error(const std::string& dir) {
  return test::error_of([&] {
    ModelLoader l(io::Checkpoint::open(dir), {});
    for (const LayerSpec& s : l.layers())
      s.kind == kernels::LayerKind::linear ? (void)l.load_linear(s.name) : (void)l.load_moe(s.name);
  });
}

void set_qc(const std::string& dir, const json& qc) {
  std::ifstream in(fs::path(dir) / "config.json");
  json c = json::parse(in);
  c["quantization_config"] = qc;
  std::ofstream(fs::path(dir) / "config.json") << c.dump(2);
}

json with(json j, const char* key, json value) {
  j[key] = std::move(value);
  return j;
}

TEST(Int4Bad, ConfigKeysFp4lmCannotHonourAreErrorsNamingThem) {
  TempDir dir;
  const Written w = write_pair(dir, cases()[0].o);
  struct Bad {
    json qc;
    const char* expect;
  };
  json g = gptq_config(128, false, true, "gptq");
  json a = awq_config(128);
  const std::vector<Bad> bad = {
      {with(g, "bits", 8), "bits is 8, expected 4"},
      {with(g, "checkpoint_format", "marlin"), "checkpoint_format 'marlin' is not supported"},
      {with(g, "is_marlin_format", true), "is_marlin_format is true"},
      {with(g, "dynamic", {{"-:.*down_proj", json::object()}}), "'dynamic' holds per-module overrides"},
      {with(g, "group_size", 0), "group_size is 0"},
      {with(g, "new_thing", 1), "unknown GPTQ key 'new_thing'"},
      {with(a, "version", "gemv"), "version 'gemv' is not supported"},
      {with(a, "version", "exllama"), "version 'exllama' is not supported"},
      {with(a, "zero_point", false), "zero_point is false"},
      {with(a, "bits", 3), "bits is 3, expected 4"},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    set_qc(w.int4, bad[i].qc);
    const std::string e = load_error(w.int4);
    EXPECT_NE(e.find(bad[i].expect), std::string::npos) << e;
    EXPECT_NE(e.find("config.json: quantization_config"), std::string::npos) << e;
  }
  json mo = modelopt_config(128, false);
  mo.erase("group_size");
  set_qc(w.int4, mo);
  std::string e0 = load_error(w.int4);
  EXPECT_NE(e0.find("W4A16_AWQ needs a positive group_size"), std::string::npos) << e0;
  set_qc(w.int4, with(modelopt_config(128, false), "has_zero_point", true));
  e0 = load_error(w.int4);
  EXPECT_NE(e0.find("has_zero_point true"), std::string::npos) << e0;
  json ct8 = ct_config(128, true, false);
  ct8["config_groups"]["group_0"]["weights"]["num_bits"] = 8;
  set_qc(w.int4, ct8);
  std::string e = load_error(w.int4);
  EXPECT_NE(e.find("8-bit integer weights"), std::string::npos) << e;
  EXPECT_NE(e.find("module model.layers.0.self_attn.q_proj"), std::string::npos) << e;
  json ct_w4a8 = ct_config(128, true, false);
  ct_w4a8["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}, {"type", "int"}, {"strategy", "token"}};
  set_qc(w.int4, ct_w4a8);
  e = load_error(w.int4);
  EXPECT_NE(e.find("integer weights with quantized activations"), std::string::npos) << e;
}

TEST(Int4Bad, MissingOrMisshapenTensorsNameThem) {
  const std::string m = "model.layers.0.self_attn.q_proj";
  auto broken = [&](const test::Int4WriteOptions& o, const std::function<bool(test::EditedTensor&)>& edit) {
    TempDir dir;
    const Written w = write_pair(dir, o);
    test::edit_tensors(w.int4, edit);
    return load_error(w.int4);
  };
  test::Int4WriteOptions gptq = cases()[1].o;  // v1, asym, desc_act
  std::string e = broken(gptq, [&](test::EditedTensor& t) { return t.name != m + ".scales"; });
  EXPECT_NE(e.find("missing tensor '" + m + ".scales'"), std::string::npos) << e;
  e = broken(gptq, [&](test::EditedTensor& t) { return t.name != m + ".g_idx"; });
  EXPECT_NE(e.find(m + ".g_idx' (I32 [128]): desc_act is true"), std::string::npos) << e;
  e = broken(gptq, [&](test::EditedTensor& t) {
    if (t.name == m + ".qweight") t.shape = {t.shape[1], t.shape[0]};
    return true;
  });
  EXPECT_NE(e.find(m + ".qweight"), std::string::npos) << e;
  e = broken(gptq, [&](test::EditedTensor& t) {
    if (t.name == m + ".g_idx") reinterpret_cast<int32_t*>(t.bytes.data())[0] = 99;
    return true;
  });
  EXPECT_NE(e.find("column 0 is in group 99"), std::string::npos) << e;
  // sym: true with a zero point other than 8.
  test::Int4WriteOptions sym = cases()[0].o;
  e = broken(sym, [&](test::EditedTensor& t) {
    if (t.name == m + ".qzeros") reinterpret_cast<int32_t*>(t.bytes.data())[0] ^= 0x3;
    return true;
  });
  EXPECT_NE(e.find(m + ".qzeros"), std::string::npos) << e;
  EXPECT_NE(e.find("sym is true but row 0 group 0 has zero point"), std::string::npos) << e;
  // desc_act false but a g_idx that reorders the columns.
  test::Int4WriteOptions reordered = cases()[1].o;
  reordered.quantization_config["desc_act"] = false;
  e = broken(reordered, [](test::EditedTensor&) { return true; });
  EXPECT_NE(e.find("the config's desc_act is false"), std::string::npos) << e;
  // AWQ: qzeros missing; compressed-tensors: weight_shape disagreeing, zero point missing.
  e = broken(cases()[4].o, [&](test::EditedTensor& t) { return t.name != m + ".qzeros"; });
  EXPECT_NE(e.find("missing tensor '" + m + ".qzeros'"), std::string::npos) << e;
  e = broken(cases()[7].o, [&](test::EditedTensor& t) {
    if (t.name == m + ".weight_shape") reinterpret_cast<int64_t*>(t.bytes.data())[1] = 64;
    return true;
  });
  EXPECT_NE(e.find(m + ".weight_shape"), std::string::npos) << e;
  EXPECT_NE(e.find("holds [128, 64], expected [128, 128]"), std::string::npos) << e;
  {  // a symmetric scheme's stored zero points: read and must be zp 0 (stored 8)
    TempDir dir;
    const Written w = write_pair(dir, cases()[6].o);  // ct_sym_g128
    auto set_zp = [&](uint32_t word) {
      test::edit_tensors(w.int4, [&](test::EditedTensor& t) {
        if (t.name == m + ".weight_zero_point")
          for (size_t i = 0; i < 16; ++i) std::memcpy(t.bytes.data() + 4 * i, &word, 4);
        return true;
      });
    };
    test::edit_tensors(w.int4, [](test::EditedTensor&) { return true; },
                       {{m + ".weight_zero_point", DType::I32, {128 / 8, 1}, std::vector<uint8_t>(64, 0)}});
    set_zp(0x88888888u);
    EXPECT_EQ(load_error(w.int4), "");
    set_zp(0x88888887u);
    e = load_error(w.int4);
    EXPECT_NE(e.find("the scheme is symmetric but entry 0 holds zero points other than 0"), std::string::npos) << e;
  }
  e = broken(cases()[7].o, [&](test::EditedTensor& t) { return t.name != m + ".weight_zero_point"; });
  EXPECT_NE(e.find("missing tensor '" + m + ".weight_zero_point'"), std::string::npos) << e;
  e = broken(cases()[10].o, [&](test::EditedTensor& t) { return t.name != m + ".weight_scale"; });
  EXPECT_NE(e.find("missing tensor '" + m + ".weight_scale'"), std::string::npos) << e;
  e = broken(cases()[10].o, [&](test::EditedTensor& t) {
    if (t.name == m + ".weight") t.shape = {t.shape[0] * 2, t.shape[1] / 2};
    return true;
  });
  EXPECT_NE(e.find(m + ".weight"), std::string::npos) << e;
  e = broken(cases()[7].o, [&](test::EditedTensor& t) { return t.name != m + ".weight_g_idx"; });
  EXPECT_NE(e.find("missing tensor '" + m + ".weight_g_idx'"), std::string::npos) << e;
}

}  // namespace
}  // namespace fp4lm::model::int4_checkpoints_test
