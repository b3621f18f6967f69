#pragma once
// The repacked int4 layer of the fast W4A16 kernels (docs/KERNELS.md, "int4 W4A16: the repacked
// layout"), built once at load from an Int4Matrix: each row's codes padded to whole chunks (256
// columns for the AVX-512 BF16 kernel, 64 for the AVX2 integer kernel) so no loop has a tail, the
// per-group scales as fp32 and the zero points as bytes (AVX-512: a per-lane correction after the
// products, asymmetric layers only; AVX2: folded into the decode table),
// and per chunk the lanes' group offsets (the same for every row, so computed once). The
// act-order permutation stays with the Int4Matrix: the call's x is gathered by it once.
#include <cstdint>
#include <vector>

#include "kernels/cpu/int4_matrix.h"

namespace fp4lm::kernels::cpu {

struct Int4Packed {
  int64_t n = 0, k = 0, kp = 0, group = 0, groups = 0, chunk = 0;  // kp: k rounded up to chunk
  bool symmetric = true;         // every zero point is 8: no zero-point work at all
  bool uniform = true;           // every chunk lies in one group (group a multiple of chunk)
  std::vector<uint8_t> codes;    // [n, kp/2], element 2j in the low nibble (perm order); padding 0x88
  std::vector<float> scales;     // [n·groups + 16] (16 spare: whole-vector loads past a row's last group); chunk 64: × 2^-7
  std::vector<uint8_t> zeros;    // [n·groups + 16] zero point (chunk 256: asymmetric layers only)
  std::vector<int32_t> chunk_group;  // [kp/chunk]: the group of the chunk's first column
  // Per chunk and lane, the lane's group minus chunk_group: chunk 256, 16 lanes of 16 columns;
  // chunk 64, 2 halves of 32 columns (the 128-bit lanes of the AVX2 decode). Columns past k take
  // the row's last group (their x is zero).
  std::vector<int32_t> lane_group;
  size_t bytes() const {
    return codes.size() + scales.size() * sizeof(float) + zeros.size();
  }
};

// m's codes, scales and zero points in the form for `chunk` (256 or 64; 64 needs a group that is
// a multiple of 32). m's own codes / scales / zeros are left as they are.
Int4Packed pack_int4(const Int4Matrix& m, int64_t chunk);

// The fast kernels' view (raw pointers only: see fp8_kernels.h).
struct Int4PackedRows {
  const uint8_t* codes;
  const float* scales;
  const uint8_t* zeros;   // or null (chunk 256, symmetric)
  const int32_t* chunk_group;
  const int32_t* lane_group;
  const float* bias;      // or null
  int64_t n, k, kp, groups;
};
Int4PackedRows int4_packed_rows(const Int4Packed& p, const float* bias);

// ---- AVX-512 (BF16 or its AVX-512F form; avx512/int4_w4a16_bf16.cpp). x per token as
// avx512::w4a16_pack_token packs it (bf16 pieces whose sum is x, in the decoder's order); xs16
// [m, kp/16] the fp32 sums of x over each 16 columns (asymmetric layers only, else null).
int64_t int4_bf16_row_block_avx512(int64_t m, int64_t k);
void int4_bf16_rows_avx512(const Int4PackedRows& w, const uint16_t* xp, const float* xs16, int64_t m, int pieces,
                           int64_t r0, int64_t r1, void* y, DType act, bool native_bf16);

// ---- AVX2 (avx2/int4_w4a16_int16.cpp): x as nvfp4_w4a16_input_avx2 quantizes it (int16 per
// 16-column block with a power-of-two factor, avx2/nvfp4.h); `group` the layer's (a multiple of 32).
int64_t int4_int16_row_block_avx2(int64_t m, int64_t k);
void int4_int16_rows_avx2(const Int4PackedRows& w, int64_t group, const int16_t* q, const float* sa, int pieces,
                          int64_t m, int64_t r0, int64_t r1, void* y, DType act);

}  // namespace fp4lm::kernels::cpu
