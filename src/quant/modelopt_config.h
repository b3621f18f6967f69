#pragma once
// ModelOpt quantization configs, in both forms (DESIGN.md §2.1):
//  - hf_quant_config.json: {"producer": .., "quantization": {quant_algo, kv_cache_quant_algo,
//    group_size, exclude_modules[, quantized_layers]}}; all four keys required (values may be null)
//  - config.json "quantization_config" with quant_method "modelopt": quant_algo, ignore,
//    kv_cache_scheme, config_groups, optional flat group_size / exclude_modules.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp4lm::quant {

enum class QuantAlgo { None, NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION };

std::string_view algo_name(QuantAlgo a);  // "NVFP4", ...; None -> "UNQUANTIZED"
// Case-insensitive; throws Error listing the supported algorithms (`where` names the source).
QuantAlgo parse_algo(const std::string& name, const std::string& where);

struct LayerQuant {
  QuantAlgo algo = QuantAlgo::None;
  std::optional<int> group_size;
};

struct QuantConfig {
  QuantAlgo algo = QuantAlgo::None;  // None: an unquantized checkpoint
  std::optional<int> group_size;
  std::optional<std::string> kv_cache_quant_algo;
  std::vector<std::string> exclude_modules;
  std::map<std::string, LayerQuant> quantized_layers;  // MIXED_PRECISION
  std::string source;                                  // which file the config came from
  nlohmann::json producer;                             // as written, or null

  bool quantized() const { return algo != QuantAlgo::None; }
};

// From the parsed files (either may be absent). `dir` only names files in errors. Both present
// and disagreeing (algo, group size, exclusions) -> Error.
QuantConfig parse_quant_config(const std::optional<nlohmann::json>& hf_quant_config,
                               const nlohmann::json& config_json, const std::string& dir);

// The exclusion rule: a pattern excludes `module` if it equals it, is a prefix of it at a dot
// boundary ("model.layers.1" excludes "model.layers.1.mlp", not "model.layers.10.mlp"), or
// glob-matches it (`*` also matches dots, `?` one character).
bool pattern_excludes(const std::string& pattern, const std::string& module);
bool is_excluded(const std::vector<std::string>& patterns, const std::string& module);

// The on-disk algorithm of one HF module (no ".weight"), exclusions applied. For
// MIXED_PRECISION: an exact quantized_layers entry, else the entry of an enclosing container at
// a dot boundary (an `experts` key covers each expert), else unquantized.
QuantAlgo module_algo(const QuantConfig& q, const std::string& module);

}  // namespace fp4lm::quant
