// ModelOpt's int4 export (quant_algo "W4A16_AWQ", modelopt/torch/export/quant_utils.py
// pack_int4_in_uint8), per Linear module:
//   `weight`       U8 [n/2, k]: rows 2i and 2i+1 of input column j in byte [i, j], row 2i in the low
//                  nibble; each nibble a two's-complement int4 q in -8..7 (round(w / scale) clamped);
//   `weight_scale` F32 / F16 / BF16 [n, k/group_size]: amax / 7 per group;
//   `pre_quant_scale` [k] (AWQ): applied to x by model::Linear, as for every format;
//   w[r, j] = q[r, j] × scale[r, j / group_size]  (Int4View: code q + 8, zero point 8).
// docs/FORMAT.md §13.
#include <fmt/format.h>

#include "core/error.h"
#include "model/quant_method/int4_method.h"
#include "model/quant_method/int4_view.h"

namespace fp4lm::model {

namespace {

class ModeloptInt4Method final : public Int4QuantMethod {
 public:
  ModeloptInt4Method() : Int4QuantMethod("weight") {}

  // A U8 `weight` with a float `weight_scale` (not the I32 packing the base class detects).
  std::optional<quant::Scheme> detect(const TensorLookup& tensors, const std::string& module) const override {
    const std::optional<DType> s = tensors(module + ".weight_scale");
    if (tensors(module + ".weight") == DType::U8 && (s == DType::F32 || s == DType::F16 || s == DType::BF16))
      return quant::Scheme::int4;
    return std::nullopt;
  }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& m, int64_t rows,
                           const LayerScheme& scheme) const override {
    const Geometry geo = geometry(p, spec, m, rows, scheme, "W4A16_AWQ", 2, 2);
    const int64_t k = geo.k, group = geo.group, groups = geo.groups;
    const TensorView& w = p.require(m + ".weight", {DType::U8}, {rows / 2, k});
    const std::vector<float> sc =
        float_values(p.require(m + ".weight_scale", {DType::F32, DType::F16, DType::BF16}, {rows, groups}));
    const uint8_t* bytes = w.data;
    auto code = [&](int64_t r, int64_t j) {
      const uint8_t b = bytes[(r / 2) * k + j];
      return ((r % 2 == 0 ? b : b >> 4) & 15) ^ 8;  // two's-complement q -> q + 8
    };
    auto zero = [](int64_t, int64_t) { return 8; };
    auto scale = [&](int64_t r, int64_t g) { return sc[static_cast<size_t>(r * groups + g)]; };
    return make_int4_view(rows, k, group, {}, code, zero, scale, p.where(m + ".weight"), p.where(m + ".weight_scale"));
  }
};

}  // namespace

const QuantMethod& modelopt_int4_method() {
  static const ModeloptInt4Method m;
  return m;
}

}  // namespace fp4lm::model
