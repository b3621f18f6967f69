#pragma once
// The AMX tile operations the AMX kernels are written against (the seam that lets one kernel body
// run on the hardware and on any CPU): a kernel body is a template over a `Tiles` type providing
//   configure(const TileConfig&), release(),
//   zero<T>(), load<T>(const void* base, int64_t stride), store<T>(void* base, int64_t stride),
//   dpbf16ps<C, A, B>(), dpbssd<C, A, B>()
// with T, C, A, B tile numbers 0-7 as template arguments (the instructions encode them). Two
// implementations: amx/tiles_native.h (the intrinsics; only in files built with -mamx-*) and
// amx_tile_emulation.h (scalar, portable: the tests run every kernel body through it on any CPU).
// docs/KERNELS.md, "AMX".
#include <cstdint>

namespace fp4lm::kernels::cpu::amx {

inline constexpr int kTiles = 8;          // tmm0-tmm7
inline constexpr int kTileRows = 16;      // palette 1: at most 16 rows of
inline constexpr int kTileRowBytes = 64;  // at most 64 bytes each

// The 64-byte operand of LDTILECFG (Intel SDM vol. 2, LDTILECFG): palette 1, then per tile its
// bytes per row (colsb) and its rows. Unconfigured tiles keep 0 rows and columns.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved0[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Every tile 16 rows × 64 bytes: the configuration of every AMX kernel here (edges are padded
// with zeros in the operands instead of narrower tiles, so one configuration serves all).
inline TileConfig full_tiles_config() {
  TileConfig c;
  for (int t = 0; t < kTiles; ++t) {
    c.colsb[t] = kTileRowBytes;
    c.rows[t] = kTileRows;
  }
  return c;
}

}  // namespace fp4lm::kernels::cpu::amx
