#pragma once
// The tile operations of amx_tiles.h on the hardware. Included only by files of kernels/cpu/amx/
// (built with -mamx-tile -mamx-bf16 -mamx-int8) and run only where the AMX backends'
// unavailable_reason() is "" (CPU features and Linux's permission for the tile state,
// amx_tile_permission.h).
//
// Written as inline assembly rather than GCC 12's <immintrin.h> macros, for two reasons: those
// stringize the tile number (so a template argument cannot name it), and their TILELOADD and
// LDTILECFG statements do not tell the compiler they read memory (no "memory" clobber; the
// config operand is declared as 8 bytes of 64), so stores of the panel just written could be
// moved after the load. Here every load, store and configuration clobbers memory; the dot
// products (registers only) are volatile, which keeps their order relative to the loads.
#include <cstdint>

#include "kernels/cpu/amx_tiles.h"

namespace fp4lm::kernels::cpu::amx {

#define FP4LM_AMX_ZERO(t) \
  if constexpr (T == t) __asm__ volatile("tilezero %%tmm" #t ::);
#define FP4LM_AMX_LOAD(t)                                                                        \
  if constexpr (T == t)                                                                          \
    __asm__ volatile("{tileloadd (%0,%1,1), %%tmm" #t "|tileloadd %%tmm" #t ", [%0+%1*1]}" ::"r"(base), \
                     "r"(static_cast<long>(stride))                                              \
                     : "memory");
#define FP4LM_AMX_STORE(t)                                                                        \
  if constexpr (T == t)                                                                           \
    __asm__ volatile("{tilestored %%tmm" #t ", (%0,%1,1)|tilestored [%0+%1*1], %%tmm" #t "}" ::"r"(base), \
                     "r"(static_cast<long>(stride))                                               \
                     : "memory");
// The (C, A, B) triples the kernel bodies use (amx_gemm.h): C 0-3, A 4-5, B 6-7.
#define FP4LM_AMX_DP(op, c, a, b)                                                           \
  if constexpr (C == c && A == a && B == b)                                                 \
    __asm__ volatile("{" op " %%tmm" #b ", %%tmm" #a ", %%tmm" #c "|" op " %%tmm" #c ", %%tmm" #a \
                     ", %%tmm" #b "}" ::);
#define FP4LM_AMX_DP_ALL(op)                                                                 \
  FP4LM_AMX_DP(op, 0, 4, 6) FP4LM_AMX_DP(op, 1, 4, 7) FP4LM_AMX_DP(op, 2, 5, 6) FP4LM_AMX_DP(op, 3, 5, 7) \
  FP4LM_AMX_DP(op, 0, 4, 7) FP4LM_AMX_DP(op, 1, 4, 6) FP4LM_AMX_DP(op, 2, 5, 7) FP4LM_AMX_DP(op, 3, 5, 6)

struct NativeTiles {
  void configure(const TileConfig& c) { __asm__ volatile("ldtilecfg %0" ::"m"(c) : "memory"); }
  void release() { __asm__ volatile("tilerelease" ::: "memory"); }
  template <int T>
  void zero() {
    static_assert(T >= 0 && T < kTiles);
    FP4LM_AMX_ZERO(0) FP4LM_AMX_ZERO(1) FP4LM_AMX_ZERO(2) FP4LM_AMX_ZERO(3)
    FP4LM_AMX_ZERO(4) FP4LM_AMX_ZERO(5) FP4LM_AMX_ZERO(6) FP4LM_AMX_ZERO(7)
  }
  template <int T>
  void load(const void* base, int64_t stride) {
    static_assert(T >= 0 && T < kTiles);
    FP4LM_AMX_LOAD(0) FP4LM_AMX_LOAD(1) FP4LM_AMX_LOAD(2) FP4LM_AMX_LOAD(3)
    FP4LM_AMX_LOAD(4) FP4LM_AMX_LOAD(5) FP4LM_AMX_LOAD(6) FP4LM_AMX_LOAD(7)
  }
  template <int T>
  void store(void* base, int64_t stride) {
    static_assert(T >= 0 && T < kTiles);
    FP4LM_AMX_STORE(0) FP4LM_AMX_STORE(1) FP4LM_AMX_STORE(2) FP4LM_AMX_STORE(3)
    FP4LM_AMX_STORE(4) FP4LM_AMX_STORE(5) FP4LM_AMX_STORE(6) FP4LM_AMX_STORE(7)
  }
  // C += A · B: C 0-3, A 4 (C 0-1) or 5 (C 2-3), B 6 or 7 (the triples of amx_gemm.h).
  template <int C, int A, int B>
  void dpbf16ps() {
    static_assert(C >= 0 && C < 4 && A == 4 + C / 2 && (B == 6 || B == 7), "a tile triple amx_gemm.h does not use");
    FP4LM_AMX_DP_ALL("tdpbf16ps")
  }
  template <int C, int A, int B>
  void dpbssd() {
    static_assert(C >= 0 && C < 4 && A == 4 + C / 2 && (B == 6 || B == 7), "a tile triple amx_gemm.h does not use");
    FP4LM_AMX_DP_ALL("tdpbssd")
  }
};

#undef FP4LM_AMX_ZERO
#undef FP4LM_AMX_LOAD
#undef FP4LM_AMX_STORE
#undef FP4LM_AMX_DP
#undef FP4LM_AMX_DP_ALL

}  // namespace fp4lm::kernels::cpu::amx
