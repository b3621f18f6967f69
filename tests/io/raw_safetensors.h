#pragma once
// Hand-built safetensors bytes for the bad-input corpus: any header text, any data size.
#include <cstdint>
#include <filesystem>
#include <string>

#include "common/paths.h"

namespace fp4lm::test {

// 8-byte little-endian length + header + data_bytes zero bytes; `declared_len` overrides the
// length field (to lie about it).
inline std::string raw_safetensors(const std::string& header, size_t data_bytes = 0,
                                   int64_t declared_len = -1) {
  uint64_t n = declared_len >= 0 ? static_cast<uint64_t>(declared_len) : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out.append(data_bytes, '\0');
  return out;
}

inline std::filesystem::path write_raw(const TempDir& dir, const std::string& name,
                                       const std::string& bytes) {
  auto p = dir / name;
  write_file(p, bytes);
  return p;
}

}  // namespace fp4lm::test
