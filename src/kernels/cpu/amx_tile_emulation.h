#pragma once
// A scalar emulation of the AMX tile operations (amx_tiles.h's interface), portable: the AMX
// kernel bodies run through it in the tests on every CPU, so their tiling, weight decode, edge
// handling and epilogue are checked where AMX is missing. Semantics follow the pseudo-code of the
// Intel SDM (vol. 2, LDTILECFG, TILELOADD, TILESTORED, TILEZERO, TDPBF16PS, TDPBSSD):
//  - a tile holds rows × colsb bytes as configured; loads zero the bytes past colsb and the rows
//    past `rows`, and so does the write-back of a dot product;
//  - TDPBF16PS: per (m, n), over the pairs k in order, acc = fma(a[m][2k], b[k][2n], acc) then
//    acc = fma(a[m][2k+1], b[k][2n+1], acc): bf16 inputs with denormals read as zero (DAZ), fp32
//    round-to-nearest-even, denormal results flushed to zero (FTZ), MXCSR not consulted. The SDM
//    does not guarantee this order on the hardware ("no guarantee of ordering of the operations"),
//    so the emulation fixes one; with exact bf16 products every order is within the bound of
//    docs/KERNELS.md ("AMX", γ_n Σ|products|) and exact where the sums are;
//  - TDPBSSD: per (m, n), acc += Σ_{i<4} int8(a[m][4k+i]) · int8(b[k][4n+i]), 32-bit wrapping.
// A configuration the hardware would fault on (#UD: mismatched shapes) throws fp4lm::Error.
#include <cstdint>

#include "kernels/cpu/amx_tiles.h"

namespace fp4lm::kernels::cpu::amx {

class EmulatedTiles {
 public:
  void configure(const TileConfig& c);
  void release();  // back to no configuration, every tile zero (TILERELEASE)

  // The run-time-indexed operations (the templates below forward to them).
  void zero_tile(int t);
  void load_tile(int t, const void* base, int64_t stride);
  void store_tile(int t, void* base, int64_t stride) const;
  void dpbf16ps_tiles(int c, int a, int b);
  void dpbssd_tiles(int c, int a, int b);

  template <int T>
  void zero() {
    zero_tile(T);
  }
  template <int T>
  void load(const void* base, int64_t stride) {
    load_tile(T, base, stride);
  }
  template <int T>
  void store(void* base, int64_t stride) const {
    store_tile(T, base, stride);
  }
  template <int C, int A, int B>
  void dpbf16ps() {
    dpbf16ps_tiles(C, A, B);
  }
  template <int C, int A, int B>
  void dpbssd() {
    dpbssd_tiles(C, A, B);
  }

 private:
  void check_configured(int t, const char* op) const;
  bool configured_ = false;
  TileConfig cfg_{};
  alignas(64) uint8_t data_[kTiles][kTileRows][kTileRowBytes] = {};
};

// One TDPBF16PS step of the emulation: fma(a, b, acc) on bf16 inputs with DAZ, FTZ on the result
// (exposed for the tests of the rounding rule).
float emulated_bf16_fma(uint16_t a, uint16_t b, float acc);

}  // namespace fp4lm::kernels::cpu::amx
