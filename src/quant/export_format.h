#pragma once
// What `fp4lm quantize` writes besides the tensors: the two ModelOpt config forms
// (hf_quant_config.json and config.json's quantization_config), the shard layout above
// --max-shard-size and its model.safetensors.index.json. No model knowledge here.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "quant/modelopt_config.h"

namespace fp4lm::quant {

// {"producer": {"name": "fp4lm", "version"}, "quantization": {"quant_algo", "kv_cache_quant_algo": null,
//  "group_size": 16, "exclude_modules"}}. algo: NVFP4 or W4A16_NVFP4 (Error otherwise).
// pre_quant_scale (AWQ): NVFP4 is written as ModelOpt names it, "NVFP4_AWQ", with "has_zero_point":
// false and "pre_quant_scale": true; W4A16_NVFP4 keeps its name and gets "pre_quant_scale": true.
nlohmann::json hf_quant_config_json(QuantAlgo algo, const std::vector<std::string>& exclude_modules,
                                    const std::string& producer_version, bool pre_quant_scale = false);

// config.json's "quantization_config": quant_method "modelopt", quant_algo, config_groups.group_0
// (weights and, for NVFP4, input_activations: {dynamic: false, num_bits: 4, type: "float",
// group_size: 16}; targets ["Linear"]), ignore, producer.
nlohmann::json quantization_config_json(QuantAlgo algo, const std::vector<std::string>& exclude_modules,
                                        const std::string& producer_version, bool pre_quant_scale = false);

// exclude_modules in ModelOpt's form (nvidia-modelopt 0.47 summarizes its unquantized modules so):
// each unquantized module becomes the shortest prefix at a dot, as "prefix*", that no quantized
// module starts with — or "prefix.*" when only "prefix." is free (a quantized sibling such as
// "layers.10" beside "layers.1") — else its own name; e.g. a router "model.layers.3.router.proj"
// becomes "model.layers.3.router*", a vision tower's modules "model.vision_tower*". Entries that
// already hold a '*' are kept; duplicates dropped; first-occurrence order.
std::vector<std::string> summarize_exclusions(const std::vector<std::string>& unquantized,
                                              const std::vector<std::string>& quantized);

// config.json's quantization_config as llm-compressor writes it for NVFP4 (nvfp4-pack-quantized:
// one group targeting Linear, 4-bit float tensor_group-16 weights, and for W4A4 activations).
nlohmann::json compressed_tensors_config_json(QuantAlgo algo, const std::vector<std::string>& ignore);

// "5GB" (10^9), "500MB", "2GiB" (2^30), "64KiB", "1000" (bytes), case-insensitive, optional
// "B"; UsageError naming `flag` on anything else or on zero.
uint64_t parse_byte_size(const std::string& text, const std::string& flag);

// Tensors (their byte sizes, in write order) split into consecutive shards of at most
// max_shard_bytes each; a single tensor larger than the limit gets a shard of its own.
struct ShardLayout {
  std::vector<std::string> files;   // "model.safetensors", or "model-00001-of-00003.safetensors", ...
  std::vector<size_t> shard_of;     // per tensor: index into files
};
ShardLayout assign_shards(const std::vector<uint64_t>& tensor_bytes, uint64_t max_shard_bytes);

// {"metadata": {"total_size": N}, "weight_map": {tensor: file}}.
nlohmann::json shard_index_json(const std::vector<std::string>& tensor_names, const ShardLayout& layout,
                                uint64_t total_size);

}  // namespace fp4lm::quant
