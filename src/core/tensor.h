#pragma once
// A non-owning view of a tensor's bytes (usually inside an mmapped safetensors file).
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fp4lm {

using Shape = std::vector<int64_t>;

inline int64_t shape_numel(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<int64_t>());
}
std::string shape_str(const Shape& s);  // "[4, 16]"

struct TensorView {
  DType dtype = DType::U8;
  Shape shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const { return shape_numel(shape); }
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data); }
};

}  // namespace fp4lm
