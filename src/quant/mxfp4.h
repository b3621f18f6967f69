#pragma once
// Scalar reference MXFP4 math (OCP Microscaling, as gpt-oss stores its experts: `*_blocks` U8
// [.., k/32, 16] and `*_scales` U8 [.., k/32]; docs/FORMAT.md §11): E2M1 codes two per byte
// (element 2j in the low nibble, as NVFP4), one E8M0 scale per 32 elements along k — a bare
// biased exponent, 2^(byte - 127), 0xFF is NaN. The oracle the kernels are compared with.
#include <cstdint>
#include <string>
#include <vector>

namespace fp4lm::quant {

inline constexpr int kMxfp4BlockSize = 32;

// 2^(b - 127) as float32 (b = 0 and 1 give 2^-127 / 2^-126: a float32 subnormal / the smallest
// normal); NaN for 0xFF.
float e8m0_to_f32(uint8_t b);

// Row r of W[n, k]: w[j] = e2m1(code) × 2^(scale[j / 32] - 127), exact in float32 (and in bf16).
// Throws when k % 32 != 0 or a scale is 0xFF (naming the row and block).
std::vector<float> dequantize_mxfp4(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k);

// The same numbers as NVFP4 (per-row global scale, E4M3 scale per 16), so the NVFP4 W4A16 kernels
// run MXFP4 exactly: global = 2^(emax - 8) with emax the row's largest exponent among blocks with
// a non-zero code, each 16-block's E4M3 scale = 2^(e - emax + 8), which E4M3 holds exactly for
// e >= emax - 17 (2^-9 is its smallest subnormal). Blocks whose codes are all ±0 get scale byte 0.
// Returns "" and fills e4m3 [k/16] / global, or says which block is out of that range.
std::string mxfp4_row_as_nvfp4(const uint8_t* codes, const uint8_t* scales, int64_t k, uint8_t* e4m3,
                               float& global);

}  // namespace fp4lm::quant
