#pragma once
// Test-side writer of compressed-tensors checkpoints: rewrites a ModelOpt checkpoint (as
// synth::write_synthetic_checkpoint writes it) in compressed-tensors' names and config, the way
// compressed-tensors' own files hold the same quantized weights (docs/FORMAT.md §7):
//  - NVFP4 `weight` -> `weight_packed` (same bytes), `weight_scale` unchanged, `weight_scale_2` x
//    -> `weight_global_scale` [1] = 1/x, `input_scale` x -> `input_global_scale` [1] = 1/x
//    (float32 reciprocals, as torch computes them);
//  - FP8 tensors keep their names; scalar scales become shape [1];
//  - hf_quant_config.json is removed and config.json's quantization_config replaced by `qc`.
// A float's reciprocal's reciprocal is not always the float (it can be one ulp off); where it is
// not, the ModelOpt checkpoint's scale is set to 1.0f/(1.0f/x) so that both directories hold the
// same weights exactly. Returns how many scales that changed.
#include <filesystem>

#include <nlohmann/json.hpp>

namespace fp4lm::test {

struct CtWriteOptions {
  nlohmann::json quantization_config;
  bool drop_input_scales = false;  // W8A16 / dynamic FP8: no static activation scales
};

int write_compressed_tensors(const std::filesystem::path& modelopt_dir, const std::filesystem::path& ct_dir,
                             const CtWriteOptions& o);

// config_groups entries as llm-compressor writes them.
nlohmann::json ct_nvfp4_group(const nlohmann::json& targets, bool w4a4);
nlohmann::json ct_fp8_group(const nlohmann::json& targets, const char* weight_strategy, const char* act);  // act: "static", "dynamic", "none"
// A whole quantization_config with `groups` and `ignore`.
nlohmann::json ct_config(const std::string& format, const nlohmann::json& groups, const nlohmann::json& ignore);

}  // namespace fp4lm::test
