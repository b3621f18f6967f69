// compressed-tensors INT4 W4A16 (format "pack-quantized", 4-bit int weights, strategy group or
// channel), per Linear module:
//   `weight_packed` I32 [rows, k/8]: column 8i + t of row r in bits 4t..4t+3 of [r, i], stored as
//                   q + 8 (q in -8..7);
//   `weight_scale`  F16 / BF16 / F32 [rows, groups] (groups 1 per channel);
//   `weight_shape`  I32 / I64 [2]: {rows, k};
//   `weight_zero_point` I32 [rows/8, groups] (asymmetric; a symmetric scheme's, if stored, must hold
//                   zp 0): row 8c + t of group g in bits 4t.. of [c, g], stored as zp + 8 (packed along the rows);
//   `weight_g_idx`  I32 [k] (actorder "group" only): the group of each input column;
//   w[r, j] = (q - zp) × scale = (stored q - stored zp) × scale; symmetric: zp = 0 (stored 8).
// docs/FORMAT.md, "int4".
#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "model/quant_method/int4_method.h"
#include "model/quant_method/int4_view.h"

namespace fp4lm::model {

namespace {

class CompressedTensorsInt4Method final : public Int4QuantMethod {
 public:
  CompressedTensorsInt4Method() : Int4QuantMethod("weight_packed") {}

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& m, int64_t rows,
                           const LayerScheme& scheme) const override {
    const quant::Int4Layout& l = scheme.on_disk.int4;
    const Geometry geo = geometry(p, spec, m, rows, scheme, "compressed-tensors INT4", 8, 8);
    const int64_t k = geo.k, group = geo.group, groups = geo.groups;
    const int64_t kp = k / 8;
    const TensorView& shape = p.require(m + ".weight_shape", {DType::I32, DType::I64}, {2});
    int64_t s0 = 0, s1 = 0;  // memcpy: a mapped tensor need not be aligned
    if (shape.dtype == DType::I32) {
      int32_t v[2];
      std::memcpy(v, shape.data, sizeof v);
      s0 = v[0], s1 = v[1];
    } else {
      std::memcpy(&s0, shape.data, 8);
      std::memcpy(&s1, shape.data + 8, 8);
    }
    if (s0 != rows || s1 != k)
      fail("{}: holds [{}, {}], expected [{}, {}] (the module's shape)", p.where(m + ".weight_shape"), s0, s1, rows, k);
    const std::vector<int32_t> wp = int32_values(p.require(m + ".weight_packed", {DType::I32}, {rows, kp}));
    const std::vector<float> sc =
        float_values(p.require(m + ".weight_scale", {DType::F16, DType::BF16, DType::F32}, {rows, groups}));
    std::vector<int32_t> zp;
    if (!l.symmetric) {
      zp = int32_values(p.require(m + ".weight_zero_point", {DType::I32}, {rows / 8, groups}));
    } else if (const TensorView* z = p.optional(m + ".weight_zero_point", {DType::I32}, {rows / 8, groups})) {
      // Some writers keep a symmetric scheme's zero points (all zp = 0, stored 8): read, must be 8.
      zp = int32_values(*z);
      for (size_t i = 0; i < zp.size(); ++i)
        if (static_cast<uint32_t>(zp[i]) != 0x88888888u)
          fail("{}: the scheme is symmetric but entry {} holds zero points other than 0 (0x{:08X})",
               p.where(m + ".weight_zero_point"), i, static_cast<uint32_t>(zp[i]));
    }
    std::vector<int32_t> g_idx;
    if (l.act_order) g_idx = int32_values(p.require(m + ".weight_g_idx", {DType::I32}, {k}));
    std::vector<int32_t> perm = act_order_permutation(g_idx, k, group, p.where(m + ".weight_g_idx"));
    auto code = [&](int64_t r, int64_t j) {
      return static_cast<int>((static_cast<uint32_t>(wp[static_cast<size_t>(r * kp + j / 8)]) >> (4 * (j % 8))) & 15u);
    };
    auto zero = [&](int64_t r, int64_t g) {
      if (zp.empty()) return 8;
      return static_cast<int>((static_cast<uint32_t>(zp[static_cast<size_t>((r / 8) * groups + g)]) >> (4 * (r % 8))) & 15u);
    };
    auto scale = [&](int64_t r, int64_t g) { return sc[static_cast<size_t>(r * groups + g)]; };
    return make_int4_view(rows, k, group, std::move(perm), code, zero, scale, p.where(m + ".weight_zero_point"),
                          p.where(m + ".weight_scale"));
  }
};

}  // namespace

const QuantMethod& compressed_tensors_int4_method() {
  static const CompressedTensorsInt4Method m;
  return m;
}

}  // namespace fp4lm::model
