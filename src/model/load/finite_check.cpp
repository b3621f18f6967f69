#include "model/load/finite_check.h"

#include <cstring>

#include <fmt/format.h>

namespace fp4lm::model {

namespace {
std::string message(const std::string& where, int64_t row, float value, int64_t batch_index, int64_t position,
                    int64_t sequence_id) {
  const char* v = value != value ? "nan" : (value > 0 ? "inf" : "-inf");
  if (batch_index < 0) return fmt::format("non-finite value ({}) in {} (row {})", v, where, row);
  std::string seq = sequence_id >= 0 ? fmt::format("sequence {}", sequence_id)
                                     : fmt::format("batch entry {}", batch_index);
  return fmt::format("non-finite value ({}) in {} at position {} of {}", v, where, position, seq);
}
}  // namespace

NonFiniteError::NonFiniteError(std::string where, int64_t row, float value, int64_t batch_index, int64_t position,
                               int64_t sequence_id)
    : Error(message(where, row, value, batch_index, position, sequence_id)),
      where_(std::move(where)),
      row_(row),
      value_(value),
      batch_index_(batch_index),
      position_(position),
      sequence_id_(sequence_id) {}

int64_t first_non_finite(const float* x, size_t n) {
  // Exponent all ones <=> NaN or inf. Integer OR-reduction over blocks vectorizes (a float
  // test would not, without -ffast-math); the exact index is searched only after a hit.
  constexpr uint32_t kExp = 0x7f800000u;
  constexpr size_t kBlock = 256;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t e = b + kBlock < n ? b + kBlock : n;
    uint32_t bad = 0;
    for (size_t i = b; i < e; ++i) {
      uint32_t u;
      std::memcpy(&u, x + i, sizeof u);
      bad |= static_cast<uint32_t>((u & kExp) == kExp);
    }
    if (bad)
      for (size_t i = b; i < e; ++i) {
        uint32_t u;
        std::memcpy(&u, x + i, sizeof u);
        if ((u & kExp) == kExp) return static_cast<int64_t>(i);
      }
  }
  return -1;
}

void check_finite(const float* x, int64_t m, int64_t width, std::string_view what, std::string_view name) {
  const int64_t i = first_non_finite(x, static_cast<size_t>(m * width));
  if (i >= 0) throw NonFiniteError(std::string(what) + std::string(name), i / width, x[i]);
}

}  // namespace fp4lm::model
