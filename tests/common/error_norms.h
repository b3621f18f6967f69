#pragma once
// Error norms the tests hold results to, computed in fp64 (one definition for every layer's tests).
#include <cmath>
#include <cstddef>
#include <span>

namespace fp4lm::test {

// ‖got − want‖₂ / ‖want‖₂, summed in order in fp64. `got` and `want` have the same length.
template <typename Want>
double rel_rms(std::span<const float> got, std::span<const Want> want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    num += d * d;
    den += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return std::sqrt(num / den);
}

inline double rel_rms(std::span<const float> got, std::span<const float> want) { return rel_rms<float>(got, want); }
inline double rel_rms(std::span<const float> got, std::span<const double> want) { return rel_rms<double>(got, want); }

}  // namespace fp4lm::test
