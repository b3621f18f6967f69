// The declared KV cache format against the one that runs (model/kv_cache_format.h): FP8 as
// declared under --kv-cache-dtype fp8; NVFP4, NVFP4_AFFINE and INT8 refused by name under "auto",
// run at an explicit --kv-cache-dtype; one log line naming the format either way.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error_of.h"
#include "common/log_capture.h"
#include "common/paths.h"
#include "model/causal_lm.h"
#include "model/kv_cache_format.h"
#include "model/synthetic_checkpoint.h"

namespace fp4lm::model::kv_cache_format_test {
namespace {

using nlohmann::json;
using test::error_of;

TEST(KvCacheFormat, UndeclaredOrFp8RunsAsChosen) {
  test::LogCapture log;
  EXPECT_EQ(resolve_kv_cache_format(std::nullopt, "auto", DType::BF16, "/c"), DType::BF16);
  EXPECT_EQ(resolve_kv_cache_format(std::string("FP8"), "auto", DType::BF16, "/c"), DType::BF16);
  EXPECT_EQ(resolve_kv_cache_format(std::string("FP8"), "fp8", DType::BF16, "/c"), DType::F8_E4M3);
  EXPECT_EQ(log.count("KV cache: bfloat16; the checkpoint declares FP8 (/c): --kv-cache-dtype fp8 runs it as declared"),
            1)
      << log.text();
  EXPECT_EQ(log.count("KV cache: fp8 (E4M3, per-layer k/v scales); the checkpoint declares FP8 (/c)"), 1) << log.text();
}

TEST(KvCacheFormat, Nvfp4Nvfp4AffineAndInt8AreRefusedByNameUnlessAFormatIsChosen) {
  for (const char* kv : {"NVFP4", "NVFP4_AFFINE", "INT8", "nvfp4"}) {
    const std::string e = error_of([&] { resolve_kv_cache_format(std::string(kv), "auto", DType::BF16, "/c"); });
    EXPECT_NE(e.find(fmt::format("/c: kv_cache_quant_algo {}", std::string(kv) == "nvfp4" ? "NVFP4" : kv)),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("not a KV cache format fp4lm runs"), std::string::npos) << e;
    test::LogCapture log;
    EXPECT_EQ(resolve_kv_cache_format(std::string(kv), "bfloat16", DType::F32, "/c"), DType::BF16);
    EXPECT_EQ(log.count("KV cache: bfloat16 by --kv-cache-dtype; the checkpoint declares"), 1) << log.text();
  }
}

TEST(KvCacheFormat, ACheckpointDeclaringAnNvfp4CacheLoadsOnlyWithAChosenFormat) {
  test::TempDir dir;
  SyntheticOptions s;
  s.architecture = "LlamaForCausalLM";
  s.algo = quant::QuantAlgo::NVFP4;
  s.write_config_quantization = false;
  const std::string d = (dir.path() / "ck").string();
  write_synthetic_checkpoint(d, s);
  const auto path = std::filesystem::path(d) / "hf_quant_config.json";
  json j = json::parse(std::ifstream(path));
  j["quantization"]["kv_cache_quant_algo"] = "NVFP4";
  std::ofstream(path) << j.dump();
  EngineOptions o;
  o.dtype = "float32";
  const std::string e = error_of([&] { CausalLM::load(d, o); });
  EXPECT_NE(e.find("hf_quant_config.json: kv_cache_quant_algo NVFP4"), std::string::npos) << e;
  o.kv_cache_dtype = "float32";
  EXPECT_NO_THROW(CausalLM::load(d, o));
}

}  // namespace
}  // namespace fp4lm::model::kv_cache_format_test
