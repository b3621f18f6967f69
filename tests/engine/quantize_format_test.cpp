// `fp4lm quantize --format compressed-tensors` (issue 24 item 5): the same quantization written
// in compressed-tensors' layout — the same code and block-scale bytes as ModelOpt's output under
// weight_packed / weight_scale, the global scales as float reciprocals of shape [1], the config as
// llm-compressor writes it, no hf_quant_config.json — loads as compressed-tensors and runs as the
// ModelOpt output does (bit for bit where every scale survives the reciprocal round trip).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "common/paths.h"
#include "engine/quantize/quantizer.h"
#include "io/checkpoint.h"
#include "model/causal_lm.h"
#include "model/load/model_loader.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::quantize_format_test {
namespace {

using quant::QuantAlgo;
namespace fs = std::filesystem;

float scalar(const io::Checkpoint& c, const std::string& name, const Shape& shape) {
  const TensorView& t = c.get(name);
  EXPECT_EQ(t.dtype, DType::F32) << name;
  EXPECT_EQ(t.shape, shape) << name;
  float v;
  std::memcpy(&v, t.data, sizeof v);
  return v;
}

bool same_bytes(const io::Checkpoint& a, const std::string& an, const io::Checkpoint& b, const std::string& bn) {
  const TensorView &x = a.get(an), &y = b.get(bn);
  return x.dtype == y.dtype && x.shape == y.shape && std::memcmp(x.data, y.data, x.nbytes) == 0;
}

std::vector<float> logits_of(const std::string& dir) {
  model::EngineOptions o;
  o.dtype = "float32";
  auto lm = model::CausalLM::load(dir, o);
  const std::vector<int32_t> tokens = {1, 200, 17, 5, 255, 40, 3};
  model::SequenceState cache = lm->new_sequence();
  std::vector<float> out(tokens.size() * lm->vocab_size());
  lm->forward(cache, tokens.data(), static_cast<int64_t>(tokens.size()), model::LogitsMode::all, out.data());
  return out;
}

TEST(QuantizeFormat, CompressedTensorsHoldsTheSameQuantizationUnderItsNames) {
  for (QuantAlgo algo : {QuantAlgo::W4A16_NVFP4, QuantAlgo::NVFP4}) {
    fp4lm::test::TempDir tmp;
    synth::SyntheticOptions s;
    s.architecture = "Qwen3MoeForCausalLM";
    s.algo = QuantAlgo::None;
    s.seed = 7;
    const std::string in = (tmp / "in").string();
    synth::write_synthetic_checkpoint(in, s);
    std::string out[2];
    for (int f = 0; f < 2; ++f) {
      engine::QuantizeOptions q;
      q.model_dir = in;
      q.out_dir = out[f] = (tmp / (f ? "ct" : "modelopt")).string();
      q.exp.algo = algo;
      q.progress = false;
      q.format = f ? quant::Family::compressed_tensors : quant::Family::modelopt;
      if (algo == QuantAlgo::NVFP4) q.calibration = {{1, 5, 9, 200, 17, 3, 40, 41, 7, 99}};
      engine::quantize_checkpoint(q);
    }
    EXPECT_FALSE(fs::exists(fs::path(out[1]) / "hf_quant_config.json"));
    auto mo = io::Checkpoint::open(out[0]), ct = io::Checkpoint::open(out[1]);
    model::ModelLoader l(io::Checkpoint::open(out[1]), {});
    EXPECT_EQ(l.quant_config().family(), quant::Family::compressed_tensors);
    bool round_trips = true;
    int modules = 0;
    for (const std::string& name : mo->tensor_names()) {
      if (!name.ends_with(".weight_scale_2")) continue;
      const std::string m = name.substr(0, name.size() - 15);
      ++modules;
      EXPECT_TRUE(same_bytes(*mo, m + ".weight", *ct, m + ".weight_packed")) << m;
      EXPECT_TRUE(same_bytes(*mo, m + ".weight_scale", *ct, m + ".weight_scale")) << m;
      EXPECT_FALSE(ct->find(m + ".weight_scale_2")) << m;
      // compressed-tensors' 2688 / amax: within one ulp of the reciprocal of ModelOpt's amax / 2688.
      const float x = scalar(*mo, name, {}), g = scalar(*ct, m + ".weight_global_scale", {1});
      EXPECT_LE(std::fabs(static_cast<double>(g) * x - 1.0), 0x1p-23) << m;
      round_trips &= 1.0f / g == x;
      if (algo != QuantAlgo::NVFP4) {
        EXPECT_FALSE(ct->find(m + ".input_global_scale")) << m;
        continue;
      }
      const float xi = scalar(*mo, m + ".input_scale", {}), gi = scalar(*ct, m + ".input_global_scale", {1});
      EXPECT_LE(std::fabs(static_cast<double>(gi) * xi - 1.0), 0x1p-23) << m;
      round_trips &= 1.0f / gi == xi;
    }
    EXPECT_GT(modules, 0);
    const auto a = logits_of(out[0]), b = logits_of(out[1]);
    ASSERT_EQ(a.size(), b.size());
    if (round_trips) {
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    } else {
      // A scale one ulp (2^-23 relative) off: the logits differ by about that much.
      double num = 0, den = 0;
      for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += a[i] * a[i];
      EXPECT_LT(std::sqrt(num / den), 1e-5);
    }
  }
}

}  // namespace
}  // namespace fp4lm::quantize_format_test
