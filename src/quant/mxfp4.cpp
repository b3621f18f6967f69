#include "quant/mxfp4.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/dtype.h"
#include "core/error.h"

namespace fp4lm::quant {

float e8m0_to_f32(uint8_t b) {
  if (b == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(b) - 127);
}

std::vector<float> dequantize_mxfp4(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t k) {
  if (k % kMxfp4BlockSize != 0) fail("MXFP4: k = {} is not a multiple of {}", k, kMxfp4BlockSize);
  std::vector<float> out(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const uint8_t s = scales[r * (k / 32) + j / 32];
      if (s == 0xFF) fail("MXFP4: row {}, block {}: scale byte 0xFF is NaN", r, j / 32);
      const uint8_t byte = codes[r * (k / 2) + j / 2];
      out[r * k + j] = e2m1_to_f32((j & 1) ? byte >> 4 : byte & 0xf) * e8m0_to_f32(s);
    }
  return out;
}

std::string mxfp4_row_as_nvfp4(const uint8_t* codes, const uint8_t* scales, int64_t k, uint8_t* e4m3,
                               float& global) {
  if (k % kMxfp4BlockSize != 0) return fmt::format("k = {} is not a multiple of {}", k, kMxfp4BlockSize);
  const int64_t blocks = k / 32;
  auto nonzero = [&](int64_t b16) {  // any code of 16-block b16 other than ±0
    for (int64_t i = 0; i < 8; ++i)
      if ((codes[b16 * 8 + i] & 0x77) != 0) return true;
    return false;
  };
  int emax = std::numeric_limits<int>::min();
  for (int64_t b = 0; b < blocks; ++b) {
    if (scales[b] == 0xFF) return fmt::format("block {}: scale byte 0xFF is NaN", b);
    if (nonzero(2 * b) || nonzero(2 * b + 1)) emax = std::max(emax, static_cast<int>(scales[b]) - 127);
  }
  if (emax == std::numeric_limits<int>::min()) emax = 0;  // an all-zero row
  if (emax - 8 < -126) return fmt::format("largest scale 2^{} is below 2^-118 (the global scale would be subnormal)", emax);
  global = std::ldexp(1.0f, emax - 8);
  for (int64_t b16 = 0; b16 < k / 16; ++b16) {
    const int e = static_cast<int>(scales[b16 / 2]) - 127;
    if (!nonzero(b16)) {
      e4m3[b16] = 0;
      continue;
    }
    const int rel = e - emax + 8;  // in [-9, 8]: an exact E4M3 power of two
    if (rel < -9)
      return fmt::format("block {}: scale 2^{} is more than 2^17 below the row's largest 2^{} (NVFP4's E4M3 block "
                         "scales cannot hold it exactly)",
                         b16 / 2, e, emax);
    e4m3[b16] = f32_to_e4m3(std::ldexp(1.0f, rel));
  }
  return "";
}

}  // namespace fp4lm::quant
