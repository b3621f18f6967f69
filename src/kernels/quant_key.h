#pragma once
// How a layer's weights and activations are quantized (docs/ARCHITECTURE.md, "Loading a model"): the pair the oracle
// matches backends on. NVFP4 W4A4 = (nvfp4_static, nvfp4_dynamic); W4A16 = (nvfp4_static, none);
// FP8 W8A8 = (fp8_static, fp8_static); FP8 weight-only W8A16 = (fp8_static, none); block-wise
// FP8 (DeepSeek / Qwen `weight_block_size`) W8A8 = (fp8_block, fp8_group_dynamic: activations
// quantized per token per K-group at run time), W8A16 = (fp8_block, none).
#include <string_view>

namespace fp4lm::kernels {

// int8: int8 weights with one float32 scale per output row (ModelOpt W8A16 / W8A8_SQ_PER_CHANNEL).
enum class WeightKey { unquantized, nvfp4_static, fp8_static, fp8_block, mxfp4, int4, int8 };
// mxfp8_dynamic: activations quantized to E4M3 per 32 inputs with an E8M0 (power-of-two) scale
// at run time (ModelOpt MXFP8, quant/mxfp8.h).
// int8_static: activations quantized to int8 with a static per-tensor scale (ModelOpt W8A8_SQ:
// q = clamp(round_half_even(x / input_scale), -128, 127), used as q × input_scale).
// fp8_tensor_dynamic: activations quantized to E4M3 with one scale per call, amax / 448 over the
// whole input (ModelOpt's uncalibrated per-tensor FP8 input quantizer: W4A8_MXFP4_FP8's recipe).
enum class ActKey { none, nvfp4_dynamic, fp8_static, fp8_group_dynamic, mxfp8_dynamic, int8_static, fp8_tensor_dynamic };

struct QuantKey {
  WeightKey weight = WeightKey::unquantized;
  ActKey act = ActKey::none;
  bool operator==(const QuantKey&) const = default;
};

inline constexpr QuantKey kUnquantized{WeightKey::unquantized, ActKey::none};
inline constexpr QuantKey kNvfp4W4A4{WeightKey::nvfp4_static, ActKey::nvfp4_dynamic};
inline constexpr QuantKey kNvfp4W4A16{WeightKey::nvfp4_static, ActKey::none};
inline constexpr QuantKey kFp8{WeightKey::fp8_static, ActKey::fp8_static};
inline constexpr QuantKey kFp8W8A16{WeightKey::fp8_static, ActKey::none};
inline constexpr QuantKey kFp8Block{WeightKey::fp8_block, ActKey::fp8_group_dynamic};
inline constexpr QuantKey kFp8BlockW8A16{WeightKey::fp8_block, ActKey::none};
// MXFP4 (OCP microscaling, gpt-oss) weight-only: activations in the engine dtype.
inline constexpr QuantKey kMxfp4W4A16{WeightKey::mxfp4, ActKey::none};
// Group-quantized int4 (GPTQ, AWQ, compressed-tensors pack-quantized, ModelOpt W4A16_AWQ)
// weight-only: activations in the engine dtype.
inline constexpr QuantKey kInt4W4A16{WeightKey::int4, ActKey::none};
// ModelOpt W4A8_NVFP4_FP8: NVFP4 weights, activations quantized to E4M3 with the static per-tensor
// input_scale (the reference backend; the NVFP4 W4A16 backends with model::Linear's FP8 pass).
inline constexpr QuantKey kNvfp4W4A8{WeightKey::nvfp4_static, ActKey::fp8_static};
// ModelOpt FP8_PER_CHANNEL_PER_TOKEN: FP8 weights, activations quantized per token at run time
// (fp8_group_dynamic with one group = the whole row; the FP8 W8A16 backends behind
// model::Linear's FP8 pass, or the reference backend).
inline constexpr QuantKey kFp8PerToken{WeightKey::fp8_static, ActKey::fp8_group_dynamic};
// ModelOpt MXFP8: E4M3 weights with an E8M0 scale per 32 inputs, held as block-FP8 1 x 32 blocks
// (the scales decoded to float32 powers of two: exact), activations MXFP8 at run time (the
// reference backend; the block-FP8 W8A16 backends behind model::Linear's MXFP8 pass).
inline constexpr QuantKey kMxfp8{WeightKey::fp8_block, ActKey::mxfp8_dynamic};
// ModelOpt W8A16: int8 weights per output channel, activations in the engine dtype.
inline constexpr QuantKey kInt8W8A16{WeightKey::int8, ActKey::none};
// ModelOpt W8A8_SQ_PER_CHANNEL: the same weights, activations (after SmoothQuant's pre_quant_scale,
// model::Linear) quantized to int8 with the static per-tensor input_scale (the reference backend;
// the int8 W8A16 backends behind model::Linear's int8 pass).
inline constexpr QuantKey kInt8W8A8{WeightKey::int8, ActKey::int8_static};
// ModelOpt W4A8_MXFP4_FP8: MXFP4 weights, activations quantized to E4M3 per tensor, with the
// static input_scale (kMxfp4W4A8) or, as the recipe exports it (no input_scale), amax / 448 of
// each call's input (kMxfp4W4A8Dynamic); the reference backend, or the W4A16 backends behind
// model::Linear's FP8 pass.
inline constexpr QuantKey kMxfp4W4A8{WeightKey::mxfp4, ActKey::fp8_static};
inline constexpr QuantKey kMxfp4W4A8Dynamic{WeightKey::mxfp4, ActKey::fp8_tensor_dynamic};

std::string_view weight_key_name(WeightKey k);  // "nvfp4_static"
std::string_view act_key_name(ActKey k);        // "nvfp4_dynamic", "none"
// The scheme names of the CLI contract: "nvfp4_w4a4", "nvfp4_w4a16", "fp8" (W8A8),
// "fp8_w8a16", "fp8_block" (W8A8), "fp8_block_w8a16", "mxfp4_w4a16", "int4_w4a16", "nvfp4_w4a8_fp8",
// "fp8_per_token", "mxfp8", "int8_w8a16", "int8_w8a8", "mxfp4_w4a8_fp8", "mxfp4_w4a8_fp8_dynamic", "unquantized".
std::string_view scheme_name(QuantKey k);

}  // namespace fp4lm::kernels
