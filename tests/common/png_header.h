#pragma once
// A PNG whose IHDR claims another size (the chunk's CRC recomputed as libpng checks it): the
// decompression-bomb input of the image tests, from a small real file.
#include <cstddef>
#include <cstdint>

namespace fp4lm::test {

// bytes: a PNG file (uint8_t or char elements); width / height written big-endian at offsets 16
// and 20, then IHDR's CRC (type + data, bytes 12-28) at 29.
template <typename Bytes>
void set_png_size(Bytes& b, uint32_t width, uint32_t height) {
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<typename Bytes::value_type>(v >> (24 - 8 * i));
  };
  put32(16, width);
  put32(20, height);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 12; i < 29; ++i) {
    crc ^= static_cast<uint8_t>(b[i]);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1)));
  }
  put32(29, ~crc);
}

}  // namespace fp4lm::test
