#pragma once
// Block-wise FP8 configs (docs/FORMAT.md §10): config.json's quantization_config
// {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic",
// "fmt": "e4m3", "modules_to_not_convert" / "ignored_layers": [...]}, as DeepSeek-V3/R1,
// Qwen3-*-FP8 and MiniMax-M2 publish it (transformers' FineGrainedFP8Config, vLLM's Fp8Config
// with a block size). A quantized module stores `weight` F8_E4M3 [N, K] and `weight_scale_inv`
// [ceil(N/bn), ceil(K/bk)] (multiplied, despite its name); activations are quantized per token
// per bk columns at run time. Modules stored in a float dtype (routers, embeddings, lm_head,
// norms) are left out of the lists in some releases, so the tensors decide what is quantized; the
// lists decide only when no tensors are consulted.
#include <string>
#include <vector>

#include "quant/quant_config.h"

namespace fp4lm::quant {

struct FineGrainedFp8Config final : QuantConfig {
  std::string source_path;
  int64_t block_n = 128, block_k = 128;
  std::vector<std::string> not_converted;  // modules_to_not_convert + ignored_layers

  Family family() const override { return Family::fine_grained_fp8; }
  const std::string& source() const override { return source_path; }
  bool quantized() const override { return true; }
  std::string describe() const override;
  std::optional<std::string> kv_cache_scheme() const override { return std::nullopt; }
  bool declares(Scheme s) const override { return s == Scheme::fp8_block; }
  Scheme module_scheme(const std::string& module, const ModuleTensors& tensors) const override;
  // An entry names a module, or a run of whole dot-separated name components of it ("gate"
  // excludes "model.layers.0.mlp.gate", not "...mlp.gate_proj").
  bool excluded(const std::string& module) const override;
  bool exclusions_decide() const override { return false; }
  std::pair<int64_t, int64_t> weight_block(const std::string&) const override { return {block_n, block_k}; }
  std::shared_ptr<const QuantConfig> with_prefix(const std::string& from, const std::string& to) const override;
};

// config.json's quantization_config with quant_method "fp8"; `where` names it. Errors for a
// missing or malformed weight_block_size (per-tensor "fp8" configs are not read), activations
// other than dynamic, an element format other than E4M3.
FineGrainedFp8Config parse_fine_grained_fp8_config(const nlohmann::json& qc, const std::string& where);

}  // namespace fp4lm::quant
