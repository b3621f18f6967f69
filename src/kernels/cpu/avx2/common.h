#pragma once
// Small AVX2 helpers shared by the NVFP4, dense and FP8 kernels. Include only from cpu/avx2/*.cpp files.
#include <immintrin.h>

#include <cstdint>

#include "core/dtype.h"

namespace fp4lm::kernels::cpu::avx2 {

// Horizontal sum of 8 lanes in a fixed order (so results never depend on anything but data).
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Writes one output element in the activation dtype.
inline void store_act(void* y, DType t, int64_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(y)[i] = v; return;
    case DType::BF16: static_cast<uint16_t*>(y)[i] = f32_to_bf16(v); return;
    default: static_cast<uint16_t*>(y)[i] = static_cast<uint16_t>(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT)); return;
  }
}

inline int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

}  // namespace fp4lm::kernels::cpu::avx2
