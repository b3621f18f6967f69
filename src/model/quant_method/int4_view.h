#pragma once
// What the int4 loaders (gptq.cpp, awq.cpp, compressed_tensors_int4.cpp) share: each decodes its
// producer's packing through three accessors — code(r, j) of row r and input column j, zero(r, g)
// and scale(r, g) of group g — and this builds the one Int4View the kernels run
// (kernels/weights.h), with act-order columns sorted into contiguous groups.
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/weights.h"

namespace fp4lm::model {

// The permutation that sorts input columns by their group (g_idx [k], each group holding exactly
// `group` columns, as GPTQ's act-order and compressed-tensors' actorder "group" write it); empty
// when g_idx is empty or already j / group. Error naming `where` for a group index out of
// [0, k / group) or a group of another size.
std::vector<int32_t> act_order_permutation(const std::vector<int32_t>& g_idx, int64_t k, int64_t group,
                                           const std::string& where);

// The values of an I32 tensor (any shape), as stored.
std::vector<int32_t> int32_values(const TensorView& t);
// A F16 / BF16 / F32 tensor as float32.
std::vector<float> float_values(const TensorView& t);

// The view of `rows` × `k` int4 weights in groups of `group` columns (k / group per row). Zero
// points must be 0..16 (GPTQ v1's stored zero - 1 read back + 1 reaches 16), scales finite;
// `where_zero` / `where_scale` name the tensors in errors.
template <class Code, class Zero, class Scale>
kernels::Int4View make_int4_view(int64_t rows, int64_t k, int64_t group, std::vector<int32_t> perm, Code code,
                                 Zero zero, Scale scale, const std::string& where_zero, const std::string& where_scale) {
  kernels::Int4View v;
  v.group = group;
  const int64_t groups = k / group;
  v.codes.resize(static_cast<size_t>(rows * (k / 2)));
  v.scales.resize(static_cast<size_t>(rows * groups));
  v.zeros.resize(static_cast<size_t>(rows * groups));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* out = v.codes.data() + r * (k / 2);
    if (perm.empty())
      for (int64_t j = 0; j < k; j += 2) out[j / 2] = static_cast<uint8_t>(code(r, j) | code(r, j + 1) << 4);
    else
      for (int64_t j = 0; j < k; j += 2)
        out[j / 2] = static_cast<uint8_t>(code(r, perm[static_cast<size_t>(j)]) |
                                          code(r, perm[static_cast<size_t>(j + 1)]) << 4);
    for (int64_t g = 0; g < groups; ++g) {
      const int z = zero(r, g);
      const float s = scale(r, g);
      if (z < 0 || z > 16) fail("{}: zero point of row {} group {} is {}, expected 0..16", where_zero, r, g, z);
      if (!std::isfinite(s)) fail("{}: scale of row {} group {} is {}, expected a finite value", where_scale, r, g, s);
      v.zeros[static_cast<size_t>(r * groups + g)] = static_cast<uint8_t>(z);
      v.scales[static_cast<size_t>(r * groups + g)] = s;
    }
  }
  v.perm = std::move(perm);
  return v;
}

}  // namespace fp4lm::model
