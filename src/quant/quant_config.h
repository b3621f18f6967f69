#pragma once
// A checkpoint's quantization config, whatever its family (docs/FORMAT.md §7): one implementation
// per producer's config format — ModelOpt (quant/modelopt_config.h), compressed-tensors
// (quant/compressed_tensors_config.h), block-wise FP8 (quant/fine_grained_fp8_config.h). It answers, per HF module, which scheme the module's
// tensors hold (exclusions applied); the family and the scheme together choose the quant method
// that reads the tensors (model/quant_method/), and the method the kernel key that runs them.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace fp4lm::quant {

// Whose config and tensor names: each family names the same codes and scales differently.
//  fine_grained_fp8: quant_method "fp8" with weight_block_size (DeepSeek-V3, Qwen3-*-FP8,
//    transformers' FineGrainedFP8Config): `weight` + `weight_scale_inv` block scales.
//  mxfp4: quant_method "mxfp4" (gpt-oss, transformers' Mxfp4Config): the MoE experts' fused
//    parameters as `<param>_blocks` + `<param>_scales` (E8M0), everything else unquantized.
//  gptq: quant_method "gptq" (AutoGPTQ / GPTQModel): `qweight` / `qzeros` / `scales` / `g_idx`.
//  awq: quant_method "awq" (AutoAWQ, GEMM layout): `qweight` / `qzeros` / `scales`.
enum class Family { modelopt, compressed_tensors, fine_grained_fp8, mxfp4, gptq, awq };
std::string_view family_name(Family f);  // "modelopt", "compressed-tensors", "fp8", "mxfp4", "gptq", "awq"

// What one module stores, in any family's names.
//  nvfp4 / nvfp4_a16: E2M1 codes, E4M3 scales per 16, a global scale; with / without an
//    activation global scale (W4A4 / W4A16).
//  fp8: E4M3 weights; activations quantized with a static per-tensor input_scale. ModelOpt has no
//    weight-only FP8 name: there the tensors decide (input_scale absent: W8A16).
//  fp8_a16: E4M3 weights, activations unquantized (compressed-tensors W8A16).
//  fp8_dynamic: E4M3 weights, activations quantized per token at run time (compressed-tensors
//    W8A8 dynamic); fp4lm runs it weight-only (W8A16), see docs/FORMAT.md §7.
//  fp8_block: E4M3 weights with one scale per block of rows × columns (DiskFormat::block),
//    activations quantized per token per column block at run time (W8A8 as DeepSeek runs it).
//  fp8_block_a16: the same weights, activations unquantized (compressed-tensors W8A16 block).
//  mxfp4: E2M1 codes with one E8M0 power-of-two scale per 32 weights, activations unquantized.
//  int4: 4-bit integers with a scale and a zero point per group of input columns (Int4Layout),
//    activations unquantized (GPTQ, AWQ, compressed-tensors pack-quantized W4A16).
enum class Scheme { unquantized, nvfp4, nvfp4_a16, fp8, fp8_a16, fp8_dynamic, fp8_block, fp8_block_a16, mxfp4, int4,
                    nvfp4_fp8, fp8_pc_pt, mxfp8, int8_a16, int8_sq, mxfp4_fp8 };
// "UNQUANTIZED", "NVFP4", "W4A16_NVFP4", "FP8", "FP8_W8A16", "FP8_DYNAMIC", "FP8_BLOCK",
// "FP8_BLOCK_W8A16", "MXFP4", "INT4_W4A16", "W4A8_NVFP4_FP8" (ModelOpt's names where it has one).
// nvfp4_fp8: NVFP4 weights (weight_scale_2 = amax/448) with static per-tensor FP8 activations.
// fp8_pc_pt ("FP8_PER_CHANNEL_PER_TOKEN"): FP8 weights per channel, FP8 activations per token at run time.
// mxfp8 ("MXFP8"): E4M3 weights with an E8M0 scale per 32 inputs, activations MXFP8 at run time.
// int8_a16 ("W8A16"): int8 weights with a scale per output channel, activations unquantized.
// int8_sq ("W8A8_SQ_PER_CHANNEL"): the same weights; SmoothQuant's pre_quant_scale, then the input
//   quantized to int8 with a static per-tensor input_scale.
// mxfp4_fp8 ("W4A8_MXFP4_FP8"): MXFP4 weights (E2M1, E8M0 scale per 32) with per-tensor FP8
//   activations: the static input_scale when stored, else amax / 448 of each call's input.
std::string_view scheme_name(Scheme s);

// How a family's int4 layer is grouped and offset (what its config says; the tensors hold the rest).
struct Int4Layout {
  int64_t group = 0;           // input columns per scale and zero point; 0: one group per row (-1)
  bool symmetric = true;       // zero point 8 (no zero-point tensor, or one that must hold 8)
  bool act_order = false;      // a g_idx tensor orders the columns into groups
  bool zeros_minus_one = false;  // GPTQ v1 (checkpoint_format "gptq"): stored zero = zero - 1
  bool operator==(const Int4Layout&) const = default;
};

// The on-disk format of a module: which names (family) hold which scheme.
struct DiskFormat {
  Family family = Family::modelopt;
  Scheme scheme = Scheme::unquantized;
  // fp8_block / fp8_block_a16: rows × columns per scale block ({128, 128} as published).
  int64_t block_n = 0, block_k = 0;
  Int4Layout int4{};  // int4
  bool operator==(const DiskFormat&) const = default;
};

// What the checkpoint's tensors say, for the parts of a config that defer to them.
struct ModuleTensors {
  // The dtype of a stored tensor, or nullopt when it is absent.
  std::function<std::optional<DType>(const std::string& name)> dtype;
  // The scheme one module's tensors hold, recognized by the family's quant methods.
  std::function<Scheme(const std::string& module)> scheme;
  explicit operator bool() const { return static_cast<bool>(dtype); }
};

class QuantConfig {
 public:
  virtual ~QuantConfig() = default;

  virtual Family family() const = 0;
  // The file and key the config came from, for errors.
  virtual const std::string& source() const = 0;
  virtual bool quantized() const = 0;
  // One line for the load log and `inspect`, e.g. "ModelOpt NVFP4 checkpoint (quant_algo=NVFP4)".
  virtual std::string describe() const = 0;
  // The KV-cache quantization the config names ("FP8"), if any; fp4lm keeps its KV cache in the
  // activation dtype whatever it says.
  virtual std::optional<std::string> kv_cache_scheme() const = 0;
  // Whether any module may hold `s` (for the load log).
  virtual bool declares(Scheme s) const = 0;

  // The scheme of one HF module (no ".weight"), exclusions applied; `tensors` (may be empty)
  // where the family lets them decide. Error naming the module for an unsupported scheme.
  virtual Scheme module_scheme(const std::string& module, const ModuleTensors& tensors) const = 0;
  // The {rows, columns} of a block-scaled scheme's weight blocks for `module`; {0, 0} otherwise.
  virtual std::pair<int64_t, int64_t> weight_block(const std::string& module) const {
    (void)module;
    return {0, 0};
  }
  // The grouping of an int4 `module`'s weights (scheme int4 only).
  virtual Int4Layout int4_layout(const std::string& module) const {
    (void)module;
    return {};
  }
  // Whether the config excludes `module` (keeps it unquantized).
  virtual bool excluded(const std::string& module) const = 0;
  // False when the tensors, not the config's exclusions, decide what is unquantized (then a
  // fused layer's shards need not agree on exclusion, only on what they hold).
  virtual bool exclusions_decide() const { return true; }
  // A scheme listed for an engine layer's own (fused) name, e.g. "model.layers.0.mlp.experts".
  virtual std::optional<Scheme> listed_scheme(const std::string& layer) const {
    (void)layer;
    return std::nullopt;
  }
  // A WARN line about the config (e.g. two config files that disagree) for these modules; ""
  // when there is nothing to say.
  virtual std::string warning(const std::vector<std::string>& modules, const ModuleTensors& tensors) const {
    (void)modules, (void)tensors;
    return "";
  }
  // The same config read for a checkpoint whose module names under `from` are read as `to`
  // (a VL checkpoint's "model.language_model." as "model.").
  virtual std::shared_ptr<const QuantConfig> with_prefix(const std::string& from, const std::string& to) const = 0;
};

// The checkpoint's config, from its parsed files (either may be absent), by config.json's
// quantization_config.quant_method: "modelopt" (or none, see modelopt_config.h),
// "compressed-tensors", "fp8" (block-wise) and "mxfp4"; any other method is an Error naming it. Neither file: an unquantized
// config.
std::shared_ptr<const QuantConfig> parse_quant_config(const std::optional<nlohmann::json>& hf_quant_config,
                                                      const nlohmann::json& config_json, const std::string& dir);

}  // namespace fp4lm::quant
