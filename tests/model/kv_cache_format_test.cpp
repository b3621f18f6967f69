// The declared KV cache format against the one that runs (model/state/kv_cache_format.h): FP8 as
// declared under --kv-cache-dtype fp8; NVFP4, NVFP4_AFFINE and INT8 as declared under "auto"
// (model/state/kv_quant.h), an explicit --kv-cache-dtype instead; one log line naming the format.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error_of.h"
#include "common/log_capture.h"
#include "common/paths.h"
#include "model/causal_lm.h"
#include "model/state/kv_cache_format.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::kv_cache_format_test {
namespace {

using nlohmann::json;
using test::error_of;

TEST(KvCacheFormat, UndeclaredOrFp8RunsAsChosen) {
  test::LogCapture log;
  EXPECT_EQ(resolve_kv_cache_format(std::nullopt, "auto", DType::BF16, "/c"), KvCacheFormat{DType::BF16});
  EXPECT_EQ(resolve_kv_cache_format(std::string("FP8"), "auto", DType::BF16, "/c"), KvCacheFormat{DType::BF16});
  EXPECT_EQ(resolve_kv_cache_format(std::string("FP8"), "fp8", DType::BF16, "/c"), KvCacheFormat{DType::F8_E4M3});
  EXPECT_EQ(log.count("KV cache: bfloat16; the checkpoint declares FP8 (/c): --kv-cache-dtype fp8 runs it as declared"),
            1)
      << log.text();
  EXPECT_EQ(log.count("KV cache: fp8 (E4M3, per-layer k/v scales); the checkpoint declares FP8 (/c)"), 1) << log.text();
}

TEST(KvCacheFormat, Nvfp4Nvfp4AffineAndInt8RunAsDeclaredUnlessAFormatIsChosen) {
  const std::pair<const char*, KvQuant> cases[] = {{"NVFP4", KvQuant::nvfp4},
                                                   {"NVFP4_AFFINE", KvQuant::nvfp4_affine},
                                                   {"INT8", KvQuant::int8},
                                                   {"nvfp4", KvQuant::nvfp4}};
  for (const auto& [kv, q] : cases) {
    test::LogCapture log;
    const KvCacheFormat f = resolve_kv_cache_format(std::string(kv), "auto", DType::BF16, "/c");
    EXPECT_EQ(f, (KvCacheFormat{DType::BF16, q})) << kv;
    EXPECT_EQ(kv_cache_format_name(f), kv_quant_name(q));
    EXPECT_EQ(log.count(fmt::format("KV cache: {} (", kv_quant_name(q))), 1) << log.text();
    EXPECT_EQ(log.count("as the checkpoint declares it (/c)"), 1) << log.text();
    EXPECT_EQ(resolve_kv_cache_format(std::string(kv), "bfloat16", DType::F32, "/c"), KvCacheFormat{DType::BF16});
    EXPECT_EQ(resolve_kv_cache_format(std::string(kv), "fp8", DType::F32, "/c"), KvCacheFormat{DType::F8_E4M3});
    EXPECT_EQ(log.count("KV cache: bfloat16 by --kv-cache-dtype; the checkpoint declares"), 1) << log.text();
  }
  const std::string e = error_of([] { resolve_kv_cache_format(std::string("FP4"), "auto", DType::BF16, "/c"); });
  EXPECT_NE(e.find("/c: kv_cache_quant_algo FP4 is not a KV cache format fp4lm knows"), std::string::npos) << e;
}

TEST(KvCacheFormat, ACheckpointDeclaringAnNvfp4CacheNeedsItsScalesOrAChosenFormat) {
  test::TempDir dir;
  synth::SyntheticOptions s;
  s.architecture = "LlamaForCausalLM";
  s.algo = quant::QuantAlgo::NVFP4;
  s.write_config_quantization = false;
  const std::string d = (dir.path() / "ck").string();
  synth::write_synthetic_checkpoint(d, s);
  const auto path = std::filesystem::path(d) / "hf_quant_config.json";
  json j = json::parse(std::ifstream(path));
  j["quantization"]["kv_cache_quant_algo"] = "NVFP4";
  std::ofstream(path) << j.dump();
  EngineOptions o;
  o.dtype = "float32";
  const std::string e = error_of([&] { CausalLM::load(d, o); });
  EXPECT_NE(e.find("the NVFP4 KV cache needs the scale tensor 'model.layers.0.self_attn.k_proj.k_scale'"),
            std::string::npos)
      << e;
  o.kv_cache_dtype = "float32";
  EXPECT_NO_THROW(CausalLM::load(d, o));
}

}  // namespace
}  // namespace fp4lm::model::kv_cache_format_test
