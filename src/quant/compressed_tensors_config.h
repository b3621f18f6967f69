#pragma once
// compressed-tensors configs (llm-compressor's output; docs/FORMAT.md §7): config.json's
// quantization_config {"quant_method": "compressed-tensors", "format", "config_groups": {name:
// {targets, weights, input_activations, format}}, "ignore", "kv_cache_scheme", ...}.
//  - A group's scheme comes from its weights / input_activations args: 4-bit float weights in
//    blocks of 16 (strategy tensor_group) are NVFP4 — W4A4 with 4-bit float activations, W4A16
//    without; 8-bit float weights per tensor or per channel are FP8 — W8A16 without activations,
//    W8A8 static (per-tensor input_scale) or dynamic (per token); 8-bit float weights in blocks
//    (strategy block, block_structure) are block-wise FP8 — W8A16, or W8A8 with dynamic
//    per-token-group activations; 4-bit int weights (strategy group or channel, symmetric or with
//    zero points, actorder) without activation args, format pack-quantized, are INT4 W4A16
//    (docs/FORMAT.md, "int4"). Anything else (INT8, int activations, MXFP4, 2:4 sparsity, transforms) is an Error naming the
//    group, the scheme and the module that uses it.
//  - `targets` and `ignore` entries are a module's full name, a "re:" regex matched from the
//    start of the name (Python's re.match), or, for targets, a layer class name ("Linear", which
//    every module fp4lm quantizes is). A module's group is the first whose targets match its
//    name, else the first that matches its class; no group: unquantized.
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "quant/quant_config.h"

namespace fp4lm::quant {

// One "targets" or "ignore" entry.
struct CtTarget {
  std::string text;                // as written
  std::optional<std::regex> regex;  // "re:" entries
  bool class_name = false;          // e.g. "Linear"
};

struct CtGroup {
  std::string name;
  std::vector<CtTarget> targets;
  std::optional<Scheme> scheme;  // nullopt: unsupported, `unsupported` says what and why
  std::string unsupported;
  std::string description;  // e.g. "NVFP4 W4A4 (nvfp4-pack-quantized)"
  int64_t block_n = 0, block_k = 0;  // block-wise FP8: block_structure
  Int4Layout int4;                   // INT4 pack-quantized
};

struct CompressedTensorsConfig final : QuantConfig {
  std::string source_path;
  std::string format;  // top-level "format"
  std::vector<CtGroup> groups;
  std::vector<CtTarget> ignore;
  std::optional<std::string> kv_cache;
  // A VL checkpoint read with its "model.language_model." modules as "model.": names are
  // matched as the file wrote them.
  std::vector<std::pair<std::string, std::string>> prefixes;  // {from, to}

  Family family() const override { return Family::compressed_tensors; }
  const std::string& source() const override { return source_path; }
  bool quantized() const override { return !groups.empty(); }
  std::string describe() const override;
  std::optional<std::string> kv_cache_scheme() const override { return kv_cache; }
  bool declares(Scheme s) const override;
  Scheme module_scheme(const std::string& module, const ModuleTensors& tensors) const override;
  bool excluded(const std::string& module) const override;
  std::pair<int64_t, int64_t> weight_block(const std::string& module) const override;
  Int4Layout int4_layout(const std::string& module) const override;
  std::shared_ptr<const QuantConfig> with_prefix(const std::string& from, const std::string& to) const override;

  // The group whose targets select `module` (ignore not applied), or nullptr.
  const CtGroup* group_of(const std::string& module) const;
  // `module` as the file names it (prefixes undone).
  std::string file_name(const std::string& module) const;
};

// config.json's quantization_config with quant_method "compressed-tensors"; `where` names it.
CompressedTensorsConfig parse_compressed_tensors_config(const nlohmann::json& qc, const std::string& where);

}  // namespace fp4lm::quant
