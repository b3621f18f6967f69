// `fp4lm quantize`'s weight methods (engine/quantize/quantizer.h WeightMethod) end to end on a
// synthetic Llama: the searched export equals quant::quantize_weight_searched weighted by the
// input channels' mean x^2 as a test observer sees them, GPTQ's export loads and runs with the
// same config files as ModelOpt's rule, and GPTQ without calibration is a usage error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "common/paths.h"
#include "core/error.h"
#include "engine/quantize/calibration_data.h"
#include "engine/quantize/quantizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "io/checkpoint.h"
#include "model/causal_lm.h"
#include "model/layers/linear.h"
#include "synth/synthetic_checkpoint.h"
#include "quant/nvfp4.h"
#include "quant/nvfp4_gptq.h"
#include "quant/nvfp4_scale_search.h"

namespace fp4lm::engine::quantize_weight_method_test {
namespace {

namespace fs = std::filesystem;
using quant::QuantAlgo;

const std::vector<std::vector<int32_t>> kCalib = {{1, 5, 9, 13, 40, 41, 7}, {2, 7, 100}, {1, 200, 3, 3, 3}};

struct Case {
  test::TempDir tmp;
  std::string in;
  Case() : in((tmp / "in").string()) {
    synth::SyntheticOptions o;
    o.architecture = "LlamaForCausalLM";
    o.algo = QuantAlgo::None;
    o.dense_dtype = DType::F32;
    o.seed = 17;
    synth::write_synthetic_checkpoint(in, o);
  }
  std::string quantize(WeightMethod m, bool calib, const std::string& name) {
    QuantizeOptions q;
    q.model_dir = in;
    q.out_dir = (tmp / name).string();
    q.exp.algo = QuantAlgo::W4A16_NVFP4;
    q.weight_method = m;
    if (calib) q.calibration = kCalib;
    q.progress = false;
    quantize_checkpoint(q);
    return q.out_dir;
  }
};

// Per Linear layer: sum x^2 per input channel and the row count, accumulated as the quantizer does.
std::map<std::string, std::pair<std::vector<double>, int64_t>> observe_moments(const std::string& dir) {
  std::map<std::string, std::pair<std::vector<double>, int64_t>> r;
  model::EngineOptions eo;
  eo.on_linear_built = [&](model::Linear& l) {
    const std::string n = l.spec().name;
    const int64_t k = l.in_features();
    l.set_input_observer([&r, n, k](const float* x, int64_t m) {
      auto& [sq, rows] = r[n];
      sq.resize(static_cast<size_t>(k), 0.0);
      rows += m;
      for (int64_t t = 0; t < m; ++t)
        for (int64_t c = 0; c < k; ++c) {
          const double v = x[t * k + c];
          sq[static_cast<size_t>(c)] += v * v;
        }
    });
  };
  auto lm = model::CausalLM::load(dir, eo);
  for (const auto& s : kCalib) {
    model::SequenceState c = lm->new_sequence(static_cast<int64_t>(s.size()));
    lm->forward(c, s.data(), static_cast<int64_t>(s.size()), model::LogitsMode::none, nullptr);
  }
  return r;
}

std::vector<float> f32(const io::Checkpoint& c, const std::string& name) {
  const TensorView& t = c.get(name);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  to_f32_n(t.data, t.dtype, v.data(), v.size());
  return v;
}

std::vector<uint8_t> bytes(const io::Checkpoint& c, const std::string& name) {
  const TensorView& t = c.get(name);
  const auto* p = static_cast<const uint8_t*>(t.data);
  return {p, p + t.nbytes};
}

void expect_runs(const std::string& dir) {
  auto lm = model::CausalLM::load(dir, {});
  model::SequenceState cache = lm->new_sequence(8);
  std::vector<int32_t> ids = {1, 5, 9, 77};
  std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
  lm->forward(cache, ids.data(), 4, model::LogitsMode::last, logits.data());
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace

TEST(QuantizeWeightMethod, SearchWithCalibrationIsTheReferenceWeightedByChannelMoments) {
  Case c;
  const std::string out = c.quantize(WeightMethod::search, true, "search");
  auto ck = io::Checkpoint::open(out), in = io::Checkpoint::open(c.in);
  const auto moments = observe_moments(c.in);
  struct Group {
    std::string layer;
    std::vector<std::string> members;
  };
  const std::string p = "model.layers.0.";
  const std::vector<Group> groups = {{p + "self_attn.qkv_proj", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
                                     {p + "self_attn.o_proj", {"self_attn.o_proj"}},
                                     {p + "mlp.gate_up_proj", {"mlp.gate_proj", "mlp.up_proj"}},
                                     {p + "mlp.down_proj", {"mlp.down_proj"}}};
  for (const Group& g : groups) {
    const auto& [sq, rows] = moments.at(g.layer);
    std::vector<float> imp(sq.size());
    for (size_t i = 0; i < sq.size(); ++i) imp[i] = static_cast<float>(sq[i] / static_cast<double>(rows));
    float gamax = 0;
    for (const std::string& m : g.members) {
      const std::vector<float> w = f32(*in, p + m + ".weight");
      gamax = std::max(gamax, quant::amax(w.data(), w.size()));
    }
    for (const std::string& m : g.members) {
      const std::vector<float> w = f32(*in, p + m + ".weight");
      const auto& shape = in->get(p + m + ".weight").shape;
      const quant::Nvfp4Weight ref = quant::quantize_weight_searched(w.data(), shape[0], shape[1], gamax, imp.data());
      EXPECT_EQ(bytes(*ck, p + m + ".weight"), ref.codes) << m;
      EXPECT_EQ(bytes(*ck, p + m + ".weight_scale"), ref.scales) << m;
      // Not the rule's export: the search moved some blocks.
      const quant::Nvfp4Weight rule = quant::quantize_weight(w.data(), shape[0], shape[1], gamax);
      EXPECT_NE(ref.scales, rule.scales) << m;
    }
  }
  expect_runs(out);
}

TEST(QuantizeWeightMethod, GptqExportLoadsRunsAndKeepsModelOptsConfigFiles) {
  Case c;
  const std::string rtn = c.quantize(WeightMethod::rtn, false, "rtn"), gptq = c.quantize(WeightMethod::gptq, true, "gptq");
  for (const char* f : {"hf_quant_config.json", "config.json"})
    EXPECT_EQ(test::read_file(fs::path(rtn) / f), test::read_file(fs::path(gptq) / f)) << f;
  auto a = io::Checkpoint::open(rtn), b = io::Checkpoint::open(gptq);
  EXPECT_EQ(a->tensor_names(), b->tensor_names());
  for (const std::string& t : a->tensor_names()) EXPECT_EQ(a->get(t).shape, b->get(t).shape) << t;
  // Error feedback changed codes (the same global scales: the group amax sets them).
  EXPECT_NE(bytes(*a, "model.layers.0.mlp.down_proj.weight"), bytes(*b, "model.layers.0.mlp.down_proj.weight"));
  EXPECT_EQ(bytes(*a, "model.layers.0.mlp.down_proj.weight_scale_2"), bytes(*b, "model.layers.0.mlp.down_proj.weight_scale_2"));
  expect_runs(gptq);
}

// Per Linear layer: H = sum x x^T (upper triangle), each forward call's products summed in float
// and then added in double, as the quantizer's calibration does.
std::map<std::string, std::vector<double>> observe_h(const std::string& dir, std::map<std::string, int64_t>& rows) {
  std::map<std::string, std::vector<double>> r;
  model::EngineOptions eo;
  eo.on_linear_built = [&](model::Linear& l) {
    const std::string n = l.spec().name;
    const int64_t k = l.in_features();
    l.set_input_observer([&r, &rows, n, k](const float* x, int64_t m) {
      auto& h = r[n];
      rows[n] += m;
      h.resize(static_cast<size_t>(k * k), 0.0);
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = i; j < k; ++j) {
          float s = 0.0f;
          for (int64_t t = 0; t < m; ++t)
            if (x[t * k + i] != 0.0f) s += x[t * k + i] * x[t * k + j];
          h[static_cast<size_t>(i * k + j)] += s;
        }
    });
  };
  auto lm = model::CausalLM::load(dir, eo);
  for (const auto& s : kCalib) {
    model::SequenceState c = lm->new_sequence(static_cast<int64_t>(s.size()));
    lm->forward(c, s.data(), static_cast<int64_t>(s.size()), model::LogitsMode::none, nullptr);
  }
  return r;
}

TEST(QuantizeWeightMethod, GptqIsTheReferenceOnTheObservedH) {
  Case c;
  const std::string out = c.quantize(WeightMethod::gptq, true, "gptq");
  auto ck = io::Checkpoint::open(out), in = io::Checkpoint::open(c.in);
  std::map<std::string, int64_t> rows;
  const auto hs = observe_h(c.in, rows);
  const std::string p = "model.layers.1.";
  for (const auto& [layer, members] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"mlp.gate_up_proj", {"mlp.gate_proj", "mlp.up_proj"}}, {"self_attn.o_proj", {"self_attn.o_proj"}}}) {
    const std::vector<double>& h = hs.at(p + layer);
    const auto k = static_cast<size_t>(in->get(p + members[0] + ".weight").shape[1]);
    std::vector<float> imp(k);  // the up-front scale search's channel weights: mean x^2
    for (size_t i = 0; i < k; ++i) imp[i] = static_cast<float>(h[i * k + i] / static_cast<double>(rows.at(p + layer)));
    float gamax = 0;
    for (const std::string& m : members) {
      const std::vector<float> w = f32(*in, p + m + ".weight");
      gamax = std::max(gamax, quant::amax(w.data(), w.size()));
    }
    for (const std::string& m : members) {
      const std::vector<float> w = f32(*in, p + m + ".weight");
      const auto& shape = in->get(p + m + ".weight").shape;
      const quant::Nvfp4Weight ref = quant::gptq_quantize_weight(w.data(), shape[0], shape[1], h.data(), gamax,
                                                                      {.scale_search = true, .act_order = true, .importance = imp.data()});
      EXPECT_EQ(bytes(*ck, p + m + ".weight"), ref.codes) << m;
      EXPECT_EQ(bytes(*ck, p + m + ".weight_scale"), ref.scales) << m;
    }
  }
}

TEST(QuantizeWeightMethod, GptqWithoutCalibrationIsAUsageError) {
  Case c;
  EXPECT_THROW(c.quantize(WeightMethod::gptq, false, "x"), UsageError);
  EXPECT_FALSE(fs::exists(c.tmp / "x"));
}

TEST(QuantizeWeightMethod, CalibTextTakesSeveralFilesAndChatDatasets) {
  FP4LM_REQUIRE_SHARED("tokenizers/qwen3/tokenizer.json");
  test::TempDir tmp;
  const std::string tok_dir = (test::shared_dir() / "tokenizers/qwen3").string();
  test::write_file(tmp / "a.txt", "Once upon a time there was a little fox who loved to read books about the sea.\n");
  const nlohmann::json conv = {{"messages", {{{"role", "user"}, {"content", "What is the capital of France?"}},
                                             {{"role", "assistant"}, {"content", "Paris."}}}}};
  test::write_file(tmp / "chat.jsonl", conv.dump() + "\n\n" + conv.dump() + "\n");
  // The chat lines: each conversation rendered with the template and encoded, one sequence each.
  auto tok = tokenizer::Tokenizer::from_dir(tok_dir);
  const std::string rendered =
      tokenizer::ChatTemplate::from_dir(tok_dir).render(conv["messages"], tokenizer::ChatOptions{});
  const std::vector<int32_t> want = tok->encode(rendered, false);
  ASSERT_NE(rendered.find("<|im_start|>user"), std::string::npos) << rendered;
  const auto chat = calibration_from_chat((tmp / "chat.jsonl").string(), tok_dir, 10, 4096);
  ASSERT_EQ(chat.size(), 2u);
  EXPECT_EQ(chat[0], want);
  // Several files in order, the sample limit across them.
  const auto text = calibration_from_text((tmp / "a.txt").string(), tok_dir, 10, 8);
  const auto both = calibration_from_files({(tmp / "a.txt").string(), (tmp / "chat.jsonl").string()}, tok_dir, 10, 8);
  ASSERT_EQ(both.size(), text.size() + 2);
  EXPECT_EQ(both[0], text[0]);
  EXPECT_EQ(both.back(), std::vector<int32_t>(want.begin(), want.begin() + 8));
  EXPECT_EQ(calibration_from_files({(tmp / "a.txt").string(), (tmp / "chat.jsonl").string()}, tok_dir, 2, 8).size(), 2u);
  // A line that is not a conversation names the file and line.
  test::write_file(tmp / "bad.jsonl", conv.dump() + "\n{\"text\": 1}\n");
  try {
    calibration_from_chat((tmp / "bad.jsonl").string(), tok_dir, 10, 64);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
}

}  // namespace fp4lm::engine::quantize_weight_method_test
