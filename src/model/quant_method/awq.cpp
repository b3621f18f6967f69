// AutoAWQ int4, GEMM layout (quant_method "awq", version "gemm"), per Linear module:
//   `qweight` I32 [k, rows/8]: output rows 8c..8c+7 of input column j in [j, c], row 8c + t in
//             bits 4·n(t)..4·n(t)+3 with AWQ's nibble order n = {0, 4, 1, 5, 2, 6, 3, 7}
//             (AutoAWQ packs rows in the order 0, 2, 4, 6, 1, 3, 5, 7);
//   `qzeros`  I32 [groups, rows/8], the same order; `scales` F16 [groups, rows];
//   w[r, j] = (q[r, j] - z[r, j / group]) × scale[r, j / group]  (zero points as stored, 0..15).
// docs/FORMAT.md, "int4".
#include <fmt/format.h>

#include "core/error.h"
#include "model/quant_method/int4_method.h"
#include "model/quant_method/int4_view.h"

namespace fp4lm::model {

namespace {

// The nibble of a packed int32 holding output row 8c + t.
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

class AwqMethod final : public Int4QuantMethod {
 public:
  AwqMethod() : Int4QuantMethod("qweight") {}

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& m, int64_t rows,
                           const LayerScheme& scheme) const override {
    const Geometry geo = geometry(p, spec, m, rows, scheme, "AWQ", 8, 2);
    const int64_t k = geo.k, group = geo.group, groups = geo.groups;
    const int64_t cols = rows / 8;
    const std::vector<int32_t> qw = int32_values(p.require(m + ".qweight", {DType::I32}, {k, cols}));
    const std::vector<int32_t> qz = int32_values(p.require(m + ".qzeros", {DType::I32}, {groups, cols}));
    const std::vector<float> sc = float_values(p.require(m + ".scales", {DType::F16, DType::BF16, DType::F32}, {groups, rows}));
    auto nibble = [](int32_t word, int64_t r) {
      return static_cast<int>((static_cast<uint32_t>(word) >> (4 * kAwqNibble[r % 8])) & 15u);
    };
    auto code = [&](int64_t r, int64_t j) { return nibble(qw[static_cast<size_t>(j * cols + r / 8)], r); };
    auto zero = [&](int64_t r, int64_t g) { return nibble(qz[static_cast<size_t>(g * cols + r / 8)], r); };
    auto scale = [&](int64_t r, int64_t g) { return sc[static_cast<size_t>(g * rows + r)]; };
    return make_int4_view(rows, k, group, {}, code, zero, scale, p.where(m + ".qzeros"), p.where(m + ".scales"));
  }
};

}  // namespace

const QuantMethod& awq_method() {
  static const AwqMethod m;
  return m;
}

}  // namespace fp4lm::model
