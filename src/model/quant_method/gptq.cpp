// GPTQ int4 (quant_method "gptq": AutoGPTQ / GPTQModel's "gptq" and "gptq_v2" checkpoint formats),
// per Linear module:
//   `qweight` I32 [k/8, rows]: input column 8i + t of output row r in bits 4t..4t+3 of [i, r];
//   `qzeros`  I32 [groups, rows/8]: row 8c + t's zero point of group g in bits 4t.. of [g, c],
//             stored minus one in the v1 format (checkpoint_format "gptq": z = nibble + 1);
//   `scales`  F16 [groups, rows]; `g_idx` I32 [k]: the group of each input column (desc_act:
//             act-order, any order with equal-sized groups; otherwise j / group_size);
//   w[r, j] = (q[r, j] - z[r, g_idx[j]]) × scale[r, g_idx[j]].
// sym: every zero point must be 8 (what GPTQ writes; vLLM assumes it). docs/FORMAT.md, "int4".
#include <fmt/format.h>

#include "core/error.h"
#include "model/quant_method/int4_method.h"
#include "model/quant_method/int4_view.h"

namespace fp4lm::model {

namespace {

class GptqMethod final : public Int4QuantMethod {
 public:
  GptqMethod() : Int4QuantMethod("qweight") {}

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& m, int64_t rows,
                           const LayerScheme& scheme) const override {
    const quant::Int4Layout& l = scheme.on_disk.int4;
    const Geometry geo = geometry(p, spec, m, rows, scheme, "GPTQ", 8, 8);
    const int64_t k = geo.k, group = geo.group, groups = geo.groups;
    const std::vector<int32_t> qw = int32_values(p.require(m + ".qweight", {DType::I32}, {k / 8, rows}));
    const std::vector<int32_t> qz = int32_values(p.require(m + ".qzeros", {DType::I32}, {groups, rows / 8}));
    const std::vector<float> sc = float_values(p.require(m + ".scales", {DType::F16, DType::BF16, DType::F32}, {groups, rows}));
    std::vector<int32_t> g_idx;
    if (const TensorView* g = p.optional(m + ".g_idx", {DType::I32}, {k})) g_idx = int32_values(*g);
    if (l.act_order && g_idx.empty())
      fail("{}: missing tensor '{}.g_idx' (I32 [{}]): desc_act is true", p.checkpoint().dir(), m, k);
    std::vector<int32_t> perm = act_order_permutation(g_idx, k, group, p.where(m + ".g_idx"));
    if (!perm.empty() && !l.act_order)
      fail("{}: orders the columns into groups (act-order) but the config's desc_act is false", p.where(m + ".g_idx"));
    const int offset = l.zeros_minus_one ? 1 : 0;
    auto code = [&](int64_t r, int64_t j) {
      return static_cast<int>((static_cast<uint32_t>(qw[static_cast<size_t>((j / 8) * rows + r)]) >> (4 * (j % 8))) & 15u);
    };
    const std::string zwhere = p.where(m + ".qzeros");
    auto zero = [&](int64_t r, int64_t g) {
      const int z = static_cast<int>((static_cast<uint32_t>(qz[static_cast<size_t>(g * (rows / 8) + r / 8)]) >> (4 * (r % 8))) & 15u) + offset;
      if (l.symmetric && z != 8)
        fail("{}: sym is true but row {} group {} has zero point {} (stored {}), expected 8", zwhere, r, g, z, z - offset);
      return z;
    };
    auto scale = [&](int64_t r, int64_t g) { return sc[static_cast<size_t>(g * rows + r)]; };
    return make_int4_view(rows, k, group, std::move(perm), code, zero, scale, zwhere, p.where(m + ".scales"));
  }
};

}  // namespace

const QuantMethod& gptq_method() {
  static const GptqMethod m;
  return m;
}

}  // namespace fp4lm::model
