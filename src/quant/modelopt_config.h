#pragma once
// ModelOpt quantization configs, in both forms and in every shape the exporters write
// (docs/ARCHITECTURE.md, "Loading a model", docs/FORMAT.md §7):
//  - hf_quant_config.json: {"producer": .., "quantization": {quant_algo[, kv_cache_quant_algo,
//    group_size, exclude_modules, quantized_layers]}}; only quant_algo is required (FP8,
//    MIXED_PRECISION and Nemotron-style files omit the rest; NVFP4 then means group_size 16).
//  - config.json "quantization_config": quant_method "modelopt" (or none, when quant_algo, a
//    producer named modelopt or a modelopt hf_quant_config.json beside it says whose it is),
//    quant_algo, ignore, kv_cache_scheme (string or object), config_groups (MIXED_PRECISION:
//    their `targets` name the modules), optional group_size / exclude_modules / quantized_layers.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "quant/quant_config.h"

namespace fp4lm::quant {

// NVFP4_AWQ: NVFP4 W4A4 whose modules may store AWQ's `pre_quant_scale` (an NVFP4 module may too:
// the tensor decides, model/quant_method/quant_method.cpp; the algorithm names the export).
// W4A16_AWQ: ModelOpt's int4 export (signed nibbles packed along the output rows, a scale per
// group_size inputs, pre_quant_scale), run as Scheme::int4 with zero point 8.
// W4A8_NVFP4_FP8: NVFP4 codes and E4M3 block scales with weight_scale_2 = weight amax / 448 (not
// /2688) and a static per-tensor FP8 activation scale input_scale = activation amax / 448.
// FP8_PER_CHANNEL_PER_TOKEN: E4M3 weights with a weight_scale per output channel (amax/448), no
// input_scale: each token's activations are quantized to E4M3 with its own amax/448 at run time.
enum class QuantAlgo {
  None, NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION, NVFP4_AWQ, W4A16_AWQ, W4A8_NVFP4_FP8, FP8_PER_CHANNEL_PER_TOKEN,
  FP8_PB_WO, MXFP8, W8A16, W8A8_SQ_PER_CHANNEL, W4A8_MXFP4_FP8, NVFP4_SVD
};
// NVFP4_SVD (NVFP4_SVDQUANT_DEFAULT_CFG): NVFP4 W4A4 with AWQ's pre_quant_scale and SVDQuant's
// low-rank branch per module, `<m>.weight_quantizer._svdquant_lora_a` [r, k] and `_b` [n, r]
// (the diffusers export: `<m>.svdquant_lora_a` / `_b`): y = NVFP4 GEMM(x') + (x' · Aᵀ) · Bᵀ with
// x' = x · pre_quant_scale (model/layers/low_rank_branch.h).
// FP8_PB_WO (written "fp8_pb_wo"): E4M3 weights with one float32 scale (amax / 448) per 128 x 128
// block, weight-only (the block size is the recipe's; the config does not record it).
// MXFP8: E4M3 weights with an E8M0 scale per 32 inputs (U8 weight_scale), MXFP8 activations.
// W8A16 (INT8_WEIGHT_ONLY_CFG): I8 weights with an F32 weight_scale per output channel (row amax / 127).
// W8A8_SQ_PER_CHANNEL (INT8_SMOOTHQUANT_CFG): the same weights, a pre_quant_scale [k] and a scalar
// input_scale (amax / 127): x · pre_quant_scale is quantized to int8 per tensor at run time.
// W4A8_MXFP4_FP8 (W4A8_MXFP4_FP8_CFG): U8 E2M1 codes [n, k/2] and U8 E8M0 weight_scale [n, k/32];
// FP8 activations per tensor, with input_scale (amax / 448) when calibrated, dynamic when not
// (the 0.47.0 recipe has no calibration algorithm, so its export writes none).
inline constexpr int64_t kFp8PbWoBlock = 128;

std::string_view algo_name(QuantAlgo a);  // "NVFP4", ...; None -> "UNQUANTIZED"
// Case-insensitive; throws Error listing the supported algorithms (`where` names the source). An
// algorithm ModelOpt writes that fp4lm does not run is refused by name, saying what it is.
QuantAlgo parse_algo(const std::string& name, const std::string& where);
// What ModelOpt's export means by a quant_algo it writes and fp4lm does not run (e.g. "W8A16":
// "int8 weights per channel, 16-bit activations"); "" for the ones fp4lm runs or unknown names.
std::string_view unsupported_modelopt_algo(const std::string& upper_name);

struct LayerQuant {
  QuantAlgo algo = QuantAlgo::None;
  std::optional<int> group_size;
};

// ModelOpt's config family: its algorithm names (QuantAlgo) are its own; what the modules hold
// is answered as family-neutral Schemes (quant_config.h).
struct ModeloptConfig final : QuantConfig {
  QuantAlgo algo = QuantAlgo::None;  // None: an unquantized checkpoint
  std::optional<int> group_size;
  std::optional<std::string> kv_cache_quant_algo;
  // "pre_quant_scale": true (AWQ exports; DeepSeek-R1-0528-NVFP4 with NVFP4): the modules that
  // store a `pre_quant_scale` apply it (they do whatever this says); the loader warns when the
  // config says so and no module stores one. "has_zero_point": only false is accepted.
  bool pre_quant_scale = false;
  // NVFP4_SVD's "lora_rank" (the diffusers export writes it): every low-rank branch must have it.
  std::optional<int> lora_rank;
  std::vector<std::string> exclude_modules;
  // False when the file lists no exclusions at all (no exclude_modules / ignore key, as in
  // Nemotron-style minimal files): modules stored unquantized are then taken as excluded.
  bool exclusions_listed = true;
  std::map<std::string, LayerQuant> quantized_layers;  // MIXED_PRECISION
  std::string source_path;                             // which file the config came from
  nlohmann::json producer;                             // as written, or null
  // Both files present and disagreeing: config.json's config is used (as vLLM does) and `other`
  // holds hf_quant_config.json's. A module the two resolve differently is decided by its
  // tensors on disk (model/layer_scheme.h); `disagreement` says what differs.
  std::shared_ptr<const ModeloptConfig> other;
  std::string disagreement;

  Family family() const override { return Family::modelopt; }
  const std::string& source() const override { return source_path; }
  bool quantized() const override { return algo != QuantAlgo::None; }
  std::string describe() const override;
  std::optional<std::string> kv_cache_scheme() const override { return kv_cache_quant_algo; }
  bool declares(Scheme s) const override;
  Int4Layout int4_layout(const std::string& module) const override;
  std::pair<int64_t, int64_t> weight_block(const std::string& module) const override;
  Scheme module_scheme(const std::string& module, const ModuleTensors& tensors) const override;
  bool excluded(const std::string& module) const override;
  bool exclusions_decide() const override { return !other && exclusions_listed; }
  std::optional<Scheme> listed_scheme(const std::string& layer) const override;
  std::string warning(const std::vector<std::string>& modules, const ModuleTensors& tensors) const override;
  std::shared_ptr<const QuantConfig> with_prefix(const std::string& from, const std::string& to) const override;
};

// ModelOpt's algorithm as a family-neutral scheme (FP8: the tensors decide W8A8 / W8A16), and
// back (Error for a scheme ModelOpt has no name for).
Scheme scheme_of(QuantAlgo a);
QuantAlgo algo_of(Scheme s);

// The config as ModelOpt's; Error when it is another family's.
const ModeloptConfig& as_modelopt(const QuantConfig& q);

// From the parsed files (either may be absent). `dir` only names files in errors. Both present:
// config.json's quantization_config is the config (vLLM's order); if they disagree (algorithm,
// group size, exclusions, per-layer algorithms), `other` and `disagreement` are set.
// config.json's quantization_config is ModelOpt's (quant_method "modelopt", or none and
// something else says so).
ModeloptConfig parse_modelopt_config(const std::optional<nlohmann::json>& hf_quant_config,
                                     const nlohmann::json& config_json, const std::string& dir);

// The exclusion rule: a pattern excludes `module` if it equals it, is a prefix of it at a dot
// boundary ("model.layers.1" excludes "model.layers.1.mlp", not "model.layers.10.mlp"), or
// glob-matches it (`*` also matches dots, `?` one character).
bool pattern_excludes(const std::string& pattern, const std::string& module);
bool is_excluded(const std::vector<std::string>& patterns, const std::string& module);

// The on-disk algorithm of one HF module (no ".weight"), exclusions applied. For
// MIXED_PRECISION: an exact quantized_layers entry, else the entry of an enclosing container at
// a dot boundary (an `experts` key covers each expert), else unquantized.
QuantAlgo module_algo(const ModeloptConfig& q, const std::string& module);

}  // namespace fp4lm::quant
