#include "kernels/cpu/int4_packed.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace fp4lm::kernels::cpu {

Int4Packed pack_int4(const Int4Matrix& m, int64_t chunk) {
  if (chunk != 256 && chunk != 64) fail("int4 repack: chunk {} is not 256 or 64", chunk);
  if (chunk == 64 && m.group % 32 != 0) fail("int4 repack: group {} is not a multiple of 32", m.group);
  Int4Packed p;
  p.n = m.n;
  p.k = m.k;
  p.chunk = chunk;
  p.kp = (m.k + chunk - 1) / chunk * chunk;
  p.group = m.group;
  p.groups = m.k / m.group;
  p.uniform = m.group % chunk == 0;
  const size_t kb = static_cast<size_t>(m.k / 2), kpb = static_cast<size_t>(p.kp / 2);
  p.codes.assign(static_cast<size_t>(m.n) * kpb, 0x88);
  for (int64_t r = 0; r < m.n; ++r) std::memcpy(p.codes.data() + r * kpb, m.codes.data() + r * kb, kb);
  const size_t ng = static_cast<size_t>(m.n * p.groups);
  p.scales.assign(ng + 16, 0.0f);
  std::copy(m.scales.begin(), m.scales.end(), p.scales.begin());
  p.symmetric = std::all_of(m.zeros.begin(), m.zeros.end(), [](float z) { return z == 8.0f; });
  if (chunk == 64 || !p.symmetric) {
    p.zeros.assign(ng + 16, 8);
    for (size_t i = 0; i < ng; ++i) p.zeros[i] = static_cast<uint8_t>(m.zeros[i]);
  }
  if (chunk == 64) {
    // The AVX2 kernel's weights are (code - zero) × 256 and its x blocks q × factor = x / 2
    // (nvfp4_w4a16_input_avx2, made for 2 × E2M1): the scales carry the 2^-7 back, exactly (a
    // power of two; only a scale below 2^-119 would lose bits, as a subnormal).
    for (size_t i = 0; i < ng; ++i) p.scales[i] *= 0x1p-7f;
  }
  const int64_t chunks = p.kp / chunk, lanes = chunk == 256 ? 16 : 2, width = chunk / lanes;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t first = c * chunk / m.group;
    p.chunk_group.push_back(static_cast<int32_t>(first));
    for (int64_t l = 0; l < lanes; ++l) {
      const int64_t col = std::min(c * chunk + l * width, m.k - 1);
      p.lane_group.push_back(static_cast<int32_t>(col / m.group - first));
    }
  }
  return p;
}

Int4PackedRows int4_packed_rows(const Int4Packed& p, const float* bias) {
  return {p.codes.data(),
          p.scales.data(),
          p.zeros.empty() ? nullptr : p.zeros.data(),
          p.chunk_group.data(),
          p.lane_group.data(),
          bias,
          p.n,
          p.k,
          p.kp,
          p.groups};
}

}  // namespace fp4lm::kernels::cpu
