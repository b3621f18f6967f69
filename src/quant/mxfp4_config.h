#pragma once
// MXFP4 configs (docs/FORMAT.md §11): config.json's quantization_config {"quant_method": "mxfp4",
// "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
// "model.embed_tokens", "lm_head"]}, as OpenAI publishes gpt-oss (transformers' Mxfp4Config).
// Only the MoE experts are quantized: their fused parameters `gate_up_proj` / `down_proj` are
// stored as `<param>_blocks` (U8 E2M1 codes, [E, rows, K/32, 16]) and `<param>_scales` (U8 E8M0,
// [E, rows, K/32]); every other module is stored in a float dtype. The tensors decide what a
// module holds; the list and the experts' names decide only where no tensors are consulted.
#include <string>
#include <vector>

#include "quant/quant_config.h"

namespace fp4lm::quant {

struct Mxfp4Config final : QuantConfig {
  std::string source_path;
  std::vector<std::string> not_converted;  // modules_to_not_convert ('*' matches any run of characters)

  Family family() const override { return Family::mxfp4; }
  const std::string& source() const override { return source_path; }
  bool quantized() const override { return true; }
  std::string describe() const override;
  std::optional<std::string> kv_cache_scheme() const override { return std::nullopt; }
  bool declares(Scheme s) const override { return s == Scheme::mxfp4; }
  Scheme module_scheme(const std::string& module, const ModuleTensors& tensors) const override;
  // An entry matches the module or a module above it ("model.layers.*.self_attn" excludes
  // "model.layers.3.self_attn.q_proj").
  bool excluded(const std::string& module) const override;
  bool exclusions_decide() const override { return false; }
  std::shared_ptr<const QuantConfig> with_prefix(const std::string& from, const std::string& to) const override;
};

// config.json's quantization_config with quant_method "mxfp4"; `where` names it. Error for a
// malformed modules_to_not_convert.
Mxfp4Config parse_mxfp4_config(const nlohmann::json& qc, const std::string& where);

}  // namespace fp4lm::quant
