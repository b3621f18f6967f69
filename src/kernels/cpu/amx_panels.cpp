#include "kernels/cpu/amx_panels.h"

#include <bit>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/nvfp4_bf16.h"

namespace fp4lm::kernels::cpu::amx {

namespace {

// Where W[n][j] (n the row within the panel, j < k_pad) lives in a panel of k_tiles tiles per half.
inline int64_t panel_index(int64_t n, int64_t j, int64_t k_tiles) {
  const int64_t h = n / 16, kt = j / kTileK, kk = j % kTileK;
  return (h * k_tiles + kt) * kTileElems + (kk / 2) * 32 + 2 * (n % 16) + (kk & 1);
}

uint16_t bf16_bits_exact(float f) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16); }
float truncate_to_bf16(float f) { return std::bit_cast<float>(std::bit_cast<uint32_t>(f) & 0xffff0000u); }

}  // namespace

int amx_pieces(DType act) { return act == DType::BF16 ? 1 : act == DType::F16 ? 2 : 3; }

std::unique_ptr<AmxInput> make_amx_input(const void* x, DType act, int64_t m, int64_t k) {
  if (act != DType::F32 && act != DType::BF16 && act != DType::F16)
    fail("AMX kernel: activation dtype {} is not float32, bfloat16 or float16", dtype_torch_name(act));
  auto in = std::make_unique<AmxInput>();
  in->m = m;
  in->k = k;
  in->m_pad = padded_m(m);
  in->k_pad = padded_k(k);
  in->pieces = amx_pieces(act);
  const size_t plane = static_cast<size_t>(in->m_pad * in->k_pad);
  in->x.assign(plane * static_cast<size_t>(in->pieces), 0);
  std::vector<float> row(static_cast<size_t>(k));
  const size_t es = dtype_size(act);
  for (int64_t t = 0; t < m; ++t) {
    to_f32_n(static_cast<const uint8_t*>(x) + static_cast<size_t>(t * k) * es, act, row.data(), static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j) {
      float rest = row[j];
      for (int p = 0; p < in->pieces; ++p) {
        // The last piece of f32 (8 bits) and of f16 (3 bits) is exact as a bf16: truncation keeps it.
        const float piece = truncate_to_bf16(rest);
        in->x[p * plane + static_cast<size_t>(t * in->k_pad + j)] = bf16_bits_exact(piece);
        rest -= piece;  // exact: the low bits of rest
      }
    }
  }
  return in;
}

void decode_nvfp4_panel(const Nvfp4Matrix& w, int64_t r, int64_t rows, uint16_t* panel) {
  const int64_t k_tiles = padded_k(w.k) / kTileK;
  std::memset(panel, 0, static_cast<size_t>(2 * k_tiles * kTileElems) * sizeof(uint16_t));
  for (int64_t n = 0; n < rows; ++n) {
    const uint8_t* codes = w.row_codes[r + n];
    const uint8_t* scales = w.row_scales[r + n];
    for (int64_t b = 0; b < w.k / 16; ++b) {
      uint16_t lut[16];  // code -> e2m1 × block scale as exact bf16 bits
      for (uint8_t c = 0; c < 16; ++c) lut[c] = nvfp4_weight_bf16(c, scales[b]);
      for (int j = 0; j < 16; j += 2) {
        const uint8_t byte = codes[(b * 16 + j) / 2];
        panel[panel_index(n, b * 16 + j, k_tiles)] = lut[byte & 0xf];
        panel[panel_index(n, b * 16 + j + 1, k_tiles)] = lut[byte >> 4];
      }
    }
  }
}

void repack_bf16_panel(const uint16_t* const* rows_ptr, int64_t rows, int64_t k, uint16_t* panel) {
  const int64_t k_tiles = padded_k(k) / kTileK;
  std::memset(panel, 0, static_cast<size_t>(2 * k_tiles * kTileElems) * sizeof(uint16_t));
  for (int64_t n = 0; n < rows; ++n)
    for (int64_t j = 0; j < k; ++j) panel[panel_index(n, j, k_tiles)] = rows_ptr[n][j];
}

uint16_t* amx_thread_panel(size_t count) {
  thread_local std::vector<uint16_t> buf;
  if (buf.size() < count) buf.resize(count);
  return buf.data();
}

float* amx_thread_out(size_t count) {
  thread_local std::vector<float> buf;
  if (buf.size() < count) buf.resize(count);
  return buf.data();
}

}  // namespace fp4lm::kernels::cpu::amx
