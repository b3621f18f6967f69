#pragma once
// Scalar reference NVFP4 math: the oracle every kernel is tested against. Follows docs/FORMAT.md
// bit for bit (float32 throughout, operations in the stated order, true divisions); the rules and
// the tests that prove them are listed in docs/FORMAT.md. Slow on purpose: obviously correct.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace fp4lm::quant {

inline constexpr int kNvfp4BlockSize = 16;               // elements per E4M3 block scale, along K
inline constexpr float kNvfp4GlobalDivisor = 2688.0f;    // 6 (max E2M1) * 448 (max E4M3)
inline constexpr uint8_t kE4M3One = 0x38;                // E4M3 byte of 1.0

// One matrix W[n,k] as ModelOpt stores it.
struct Nvfp4Weight {
  int64_t n = 0, k = 0;
  std::vector<uint8_t> codes;   // U8 [n, k/2], element 2j in the low nibble, 2j+1 in the high
  std::vector<uint8_t> scales;  // F8_E4M3 [n, k/16]
  float weight_scale_2 = 0;     // global scale: amax / 2688
};

// max |x| over n values (0 for n == 0). NaN-free input assumed.
float amax(const float* x, size_t n);

// W row-major [n,k] float32. group_amax: the amax of the whole fused group (q/k/v, gate/up, ...)
// when given, else this tensor's own. Throws fp4lm::Error when k % 16 != 0, when W holds NaN/inf,
// or when group_amax is negative, non-finite, or zero while W is not all zero.
// An all-zero tensor (amax == 0, where §3's formula divides 0 by 0) gives codes 0, every block
// scale 0x38 (1.0) and weight_scale_2 = 0, so it dequantizes to exact zeros.
Nvfp4Weight quantize_weight(const float* w, int64_t n, int64_t k,
                            std::optional<float> group_amax = std::nullopt);

// w = e2m1(code) * float(scale) * global, global = row_scale[row] when given (fused shards keep
// their own weight_scale_2 per output row), else weight_scale_2. Throws on k % 16 != 0 and on a
// NaN scale byte (0x7F / 0xFF), naming the row and block.
std::vector<float> dequantize_weight(const uint8_t* codes, const uint8_t* scales, int64_t n,
                                     int64_t k, float weight_scale_2,
                                     const float* row_scale = nullptr);
std::vector<float> dequantize_weight(const Nvfp4Weight& w);

// Activations x[m,k], quantized at run time (W4A4), same packing as weights.
struct Nvfp4Activation {
  int64_t m = 0, k = 0;
  std::vector<uint8_t> codes;   // [m, k/2]
  std::vector<uint8_t> scales;  // E4M3 [m, k/16]
};

// Per block: G = 1/input_scale; sf = e4m3(min(G*bamax/6, 448)); codes = e2m1(x * (G/sf)), all 0
// when sf == 0. Throws on k % 16 != 0, NaN/inf in x, input_scale not finite and > 0.
Nvfp4Activation quantize_activation(const float* x, int64_t m, int64_t k, float input_scale);
// value = e2m1(code) * float(sf) * input_scale: the W4A4 GEMM's (code*sf) products times alpha's
// input_scale factor.
std::vector<float> dequantize_activation(const Nvfp4Activation& a, float input_scale);
// quantize_activation then dequantize_activation.
std::vector<float> qdq_activation(const float* x, int64_t m, int64_t k, float input_scale);

// Single-block primitives the kernels' tests reuse.
// Export rule: s = bamax/(6*s2); 1 if 0; clamp [2^-9, 448]; E4M3 RNE. s2 must be > 0.
uint8_t weight_block_scale(float block_amax, float weight_scale_2);
// Run-time rule: e4m3(min((1/input_scale)*bamax/6, 448)).
uint8_t activation_block_scale(float block_amax, float input_scale);

}  // namespace fp4lm::quant
