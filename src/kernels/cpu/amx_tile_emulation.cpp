#include "kernels/cpu/amx_tile_emulation.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace fp4lm::kernels::cpu::amx {

namespace {

// make_fp32 of the SDM (the bf16 in the upper half of a dword), denormals read as zero.
float bf16_daz(uint16_t h) {
  if ((h & 0x7f80) == 0) h &= 0x8000;
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

float ftz(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }

}  // namespace

float emulated_bf16_fma(uint16_t a, uint16_t b, float acc) { return ftz(std::fma(bf16_daz(a), bf16_daz(b), acc)); }

void EmulatedTiles::configure(const TileConfig& c) {
  if (c.palette != 1) fail("AMX emulation: palette {} (only palette 1 exists)", c.palette);
  for (int t = 0; t < kTiles; ++t)
    if (c.rows[t] > kTileRows || c.colsb[t] > kTileRowBytes)
      fail("AMX emulation: tile {} configured {} rows × {} bytes (at most {} × {})", t, c.rows[t], c.colsb[t],
           kTileRows, kTileRowBytes);
  cfg_ = c;
  configured_ = true;
  std::memset(data_, 0, sizeof(data_));
}

void EmulatedTiles::release() {
  configured_ = false;
  cfg_ = TileConfig{};
  std::memset(data_, 0, sizeof(data_));
}

void EmulatedTiles::check_configured(int t, const char* op) const {
  if (t < 0 || t >= kTiles) fail("AMX emulation: {} on tile {} (tiles are 0-7)", op, t);
  if (!configured_ || cfg_.rows[t] == 0 || cfg_.colsb[t] == 0)
    fail("AMX emulation: {} on tile {}, which is not configured", op, t);
}

void EmulatedTiles::zero_tile(int t) {
  check_configured(t, "TILEZERO");
  std::memset(data_[t], 0, sizeof(data_[t]));
}

void EmulatedTiles::load_tile(int t, const void* base, int64_t stride) {
  check_configured(t, "TILELOADD");
  std::memset(data_[t], 0, sizeof(data_[t]));
  const auto* p = static_cast<const uint8_t*>(base);
  for (int r = 0; r < cfg_.rows[t]; ++r) std::memcpy(data_[t][r], p + r * stride, cfg_.colsb[t]);
}

void EmulatedTiles::store_tile(int t, void* base, int64_t stride) const {
  check_configured(t, "TILESTORED");
  auto* p = static_cast<uint8_t*>(base);
  for (int r = 0; r < cfg_.rows[t]; ++r) std::memcpy(p + r * stride, data_[t][r], cfg_.colsb[t]);
}

void EmulatedTiles::dpbf16ps_tiles(int c, int a, int b) {
  check_configured(c, "TDPBF16PS");
  check_configured(a, "TDPBF16PS");
  check_configured(b, "TDPBF16PS");
  // The SDM's #UD conditions on the shapes.
  const int m_rows = cfg_.rows[c], n = cfg_.colsb[c] / 4, pairs = cfg_.colsb[a] / 4;
  if (cfg_.rows[a] != m_rows || cfg_.rows[b] != pairs || cfg_.colsb[b] != cfg_.colsb[c] || c == a || c == b || a == b)
    fail("AMX emulation: TDPBF16PS tmm{}, tmm{}, tmm{} with mismatched shapes", c, a, b);
  for (int m = 0; m < m_rows; ++m) {
    float acc[16];
    std::memcpy(acc, data_[c][m], sizeof(float) * static_cast<size_t>(n));
    uint16_t arow[32];
    std::memcpy(arow, data_[a][m], sizeof(arow));
    for (int k = 0; k < pairs; ++k) {
      uint16_t brow[32];
      std::memcpy(brow, data_[b][k], sizeof(brow));
      for (int j = 0; j < n; ++j) {
        acc[j] = emulated_bf16_fma(arow[2 * k], brow[2 * j], acc[j]);
        acc[j] = emulated_bf16_fma(arow[2 * k + 1], brow[2 * j + 1], acc[j]);
      }
    }
    std::memset(data_[c][m], 0, kTileRowBytes);
    std::memcpy(data_[c][m], acc, sizeof(float) * static_cast<size_t>(n));
  }
  for (int m = m_rows; m < kTileRows; ++m) std::memset(data_[c][m], 0, kTileRowBytes);
}

void EmulatedTiles::dpbssd_tiles(int c, int a, int b) {
  check_configured(c, "TDPBSSD");
  check_configured(a, "TDPBSSD");
  check_configured(b, "TDPBSSD");
  const int m_rows = cfg_.rows[c], n = cfg_.colsb[c] / 4, quads = cfg_.colsb[a] / 4;
  if (cfg_.rows[a] != m_rows || cfg_.rows[b] != quads || cfg_.colsb[b] != cfg_.colsb[c] || c == a || c == b || a == b)
    fail("AMX emulation: TDPBSSD tmm{}, tmm{}, tmm{} with mismatched shapes", c, a, b);
  for (int m = 0; m < m_rows; ++m) {
    uint32_t acc[16];
    std::memcpy(acc, data_[c][m], sizeof(uint32_t) * static_cast<size_t>(n));
    for (int k = 0; k < quads; ++k)
      for (int j = 0; j < n; ++j)
        for (int i = 0; i < 4; ++i) {
          const int32_t x = static_cast<int8_t>(data_[a][m][4 * k + i]);
          const int32_t y = static_cast<int8_t>(data_[b][k][4 * j + i]);
          acc[j] += static_cast<uint32_t>(x * y);  // wraps like the hardware's dword add
        }
    std::memset(data_[c][m], 0, kTileRowBytes);
    std::memcpy(data_[c][m], acc, sizeof(uint32_t) * static_cast<size_t>(n));
  }
  for (int m = m_rows; m < kTileRows; ++m) std::memset(data_[c][m], 0, kTileRowBytes);
}

}  // namespace fp4lm::kernels::cpu::amx
