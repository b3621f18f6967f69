// --kv-cache-dtype: auto follows the activation dtype; fp8 stores K/V as E4M3 with the
// checkpoint's per-layer k_scale / v_scale (1.0 with a WARN when absent), at half the bytes of
// a bf16 cache, and the model runs (prefill, decode, batches) with either on an FP8 checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/checkpoint_edit.h"
#include "common/paths.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "synth/synthetic_checkpoint.h"
#include "common/error_norms.h"

namespace fp4lm::model::kv_cache_dtype_test {
namespace {

using quant::QuantAlgo;
using test::TempDir;

const std::vector<int32_t> kTokens = {1, 200, 17, 5, 255, 40, 40, 3, 129, 77, 64, 12};

// An FP8 (W8A8) Qwen3 checkpoint; with `scales`, every layer gets k_scale = k, v_scale = v as
// ModelOpt writes them (self_attn.k_proj.k_scale, self_attn.v_proj.v_scale: scalar float32).
std::string fp8_checkpoint(const std::filesystem::path& dir, bool scales, float k = 0.02f, float v = 0.01f) {
  synth::SyntheticOptions s;
  s.architecture = "Qwen3ForCausalLM";
  s.algo = QuantAlgo::FP8;
  s.seed = 9;
  synth::write_synthetic_checkpoint(dir.string(), s);
  if (scales) {
    std::vector<test::EditedTensor> extra;
    auto scalar = [](const std::string& name, float x) {
      test::EditedTensor t{name, DType::F32, {}, std::vector<uint8_t>(4)};
      std::memcpy(t.bytes.data(), &x, 4);
      return t;
    };
    for (int64_t l = 0; l < s.layers; ++l) {
      extra.push_back(scalar(fmt::format("model.layers.{}.self_attn.k_proj.k_scale", l), k));
      extra.push_back(scalar(fmt::format("model.layers.{}.self_attn.v_proj.v_scale", l), v));
    }
    test::edit_tensors(dir, [](test::EditedTensor&) { return true; }, std::move(extra));
  }
  return dir.string();
}

// Logits of kTokens: a prefill of 7 then decode steps one by one (the `all` rows of the prefill,
// then each step's `last`).
std::vector<float> run(const CausalLM& lm) {
  const int64_t vocab = lm.vocab_size();
  SequenceState s = lm.new_sequence();
  std::vector<float> out(kTokens.size() * vocab);
  lm.forward(s, kTokens.data(), 7, LogitsMode::all, out.data());
  for (size_t t = 7; t < kTokens.size(); ++t) lm.forward(s, &kTokens[t], 1, LogitsMode::last, out.data() + t * vocab);
  return out;
}

std::unique_ptr<CausalLM> load(const std::string& dir, const std::string& kv) {
  EngineOptions o;
  o.dtype = "bfloat16";
  o.kv_cache_dtype = kv;
  return CausalLM::load(dir, o);
}

TEST(KvCacheDtype, AutoFollowsTheActivationDtype) {
  TempDir dir;
  const std::string d = fp8_checkpoint(dir.path(), false);
  EXPECT_EQ(load(d, "auto")->kv_dtype(), DType::BF16);
  EXPECT_EQ(load(d, "float16")->kv_dtype(), DType::F16);
  EngineOptions o;
  o.dtype = "float32";
  EXPECT_EQ(CausalLM::load(d, o)->kv_dtype(), DType::F32);
  EXPECT_THROW(load(d, "fp8_e5m2"), UsageError);
  EXPECT_THROW(parse_kv_cache_dtype("int8"), UsageError);
}

TEST(KvCacheDtype, Fp8HalvesKvMemoryAndStaysCloseToBfloat16) {
  TempDir dir;
  const std::string d = fp8_checkpoint(dir.path(), true);
  auto bf16 = load(d, "bfloat16"), fp8 = load(d, "fp8");
  EXPECT_EQ(fp8->kv_dtype(), DType::F8_E4M3);
  EXPECT_EQ(fp8->sequence_bytes(64) * 2, bf16->sequence_bytes(64));
  EXPECT_EQ(fp8->new_sequence(64).reserved_bytes() * 2, bf16->new_sequence(64).reserved_bytes());
  const auto a = run(*bf16), b = run(*fp8);
  const double e = test::rel_rms(b, a);
  RecordProperty("fp8_vs_bf16_kv_rel_rms", std::to_string(e));
  EXPECT_GT(e, 0.0);   // the cache really is 8-bit
  EXPECT_LT(e, 0.05);  // E4M3 keeps 3 mantissa bits: a few percent on the logits at most
  for (float x : b) ASSERT_TRUE(std::isfinite(x));
}

TEST(KvCacheDtype, Fp8UsesTheCheckpointScales) {
  TempDir good, absent, one, wrong;
  const std::string d = fp8_checkpoint(good.path(), true);
  const auto ref = run(*load(d, "bfloat16"));
  const auto with_scales = run(*load(d, "fp8"));
  // Absent scales are 1.0: the same as writing 1.0.
  const auto missing = run(*load(fp8_checkpoint(absent.path(), false), "fp8"));
  EXPECT_EQ(missing, run(*load(fp8_checkpoint(one.path(), true, 1.0f, 1.0f), "fp8")));
  // A scale far too small saturates K/V at ±448 × scale: visibly worse than the right one
  // (E4M3's relative precision is the same over its normal range, so only clipping and
  // subnormals show a scale's effect).
  const auto bad = run(*load(fp8_checkpoint(wrong.path(), true, 0.001f, 0.001f), "fp8"));
  EXPECT_GT(test::rel_rms(bad, ref), 2 * test::rel_rms(with_scales, ref));
}

TEST(KvCacheDtype, BadScaleTensorsAreNamed) {
  TempDir dir;
  const std::string d = fp8_checkpoint(dir.path(), true, -1.0f, 0.01f);
  try {
    load(d, "fp8");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.self_attn.k_proj.k_scale' = -1 is not a positive finite scale"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(load(d, "bfloat16"));  // only read for an FP8 cache
}

}  // namespace
}  // namespace fp4lm::model::kv_cache_dtype_test
