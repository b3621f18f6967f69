// ModelOpt's W4A8_MXFP4_FP8 export (docs/FORMAT.md, "W4A8_MXFP4_FP8"), as ModelOpt 0.47.0 writes it
// (export/quant_utils.py: get_weight_scaling_factor and to_quantized_weight through
// MXFP4QTensor.quantize), per Linear module:
//   `weight`        U8 [n, k/2]: E2M1 codes, element 2j in the low nibble;
//   `weight_scale`  U8 [n, k/32]: E8M0 bytes, e + 127 with e = ceil(log2(block amax / 6));
//   `input_scale`   F32 scalar, only when the input quantizer was calibrated (amax / 448): the
//                   recipe W4A8_MXFP4_FP8_CFG has no calibration algorithm, so its export has none
//                   and the activations are quantized per tensor with amax / 448 of each input.
// w[r, j] = e2m1(code) × 2^(byte - 127) (kernels::Mxfp4View, the file's bytes in place).
#include <optional>

#include "core/error.h"
#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

namespace {

class ModeloptMxfp4Method final : public QuantMethod {
 public:
  kernels::WeightKey weight_key() const override { return kernels::WeightKey::mxfp4; }

  std::optional<quant::Scheme> detect(const TensorLookup& tensors, const std::string& module) const override {
    if (tensors(module + ".weight") == DType::U8 && tensors(module + ".weight_scale") == DType::U8)
      return quant::Scheme::mxfp4_fp8;
    return std::nullopt;
  }

  // Static when every module of the layer stores an input_scale, dynamic per tensor when none does.
  kernels::QuantKey key(const quant::DiskFormat&, const std::vector<std::string>& modules,
                        const TensorLookup& tensors) const override {
    if (!tensors) return kernels::kMxfp4W4A8Dynamic;
    int stored = 0;
    for (const std::string& m : modules) stored += tensors(m + ".input_scale") ? 1 : 0;
    if (stored != 0 && stored != static_cast<int>(modules.size()))
      fail("W4A8_MXFP4_FP8: {} of the {} modules fused with {} store an input_scale; the shards of one layer share "
           "their input, so all or none must",
           stored, modules.size(), modules.empty() ? std::string("?") : modules[0]);
    return stored ? kernels::kMxfp4W4A8 : kernels::kMxfp4W4A8Dynamic;
  }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t rows,
                           const LayerScheme& scheme) const override {
    const int64_t k = spec.in_features;
    if (k % 32 != 0)
      fail("{}: W4A8_MXFP4_FP8 layer {}: in_features {} is not a multiple of the 32-element scale block",
           p.checkpoint().dir(), spec.name, k);
    kernels::Mxfp4View v;
    const std::string wname = module + ".weight", sname = module + ".weight_scale";
    if (!p.checkpoint().find(wname))
      fail("{}: missing tensor '{}' (W4A8_MXFP4_FP8: U8 E2M1 codes [{}, {}])", p.checkpoint().dir(), wname, rows,
           k / 2);
    if (!p.checkpoint().find(sname))
      fail("{}: missing tensor '{}' (W4A8_MXFP4_FP8: U8 E8M0 scales [{}, {}], one per 32 inputs)",
           p.checkpoint().dir(), sname, rows, k / 32);
    v.codes = p.require(wname, {DType::U8}, {rows, k / 2}).data;
    v.scales = p.require(sname, {DType::U8}, {rows, k / 32}).data;
    for (int64_t i = 0; i < rows * (k / 32); ++i)
      if (v.scales[i] == 0xFF) fail("{}: E8M0 scale [{}, {}] is 0xFF (NaN)", p.where(sname), i / (k / 32), i % (k / 32));
    const std::string iname = module + ".input_scale";
    if (scheme.key == kernels::kMxfp4W4A8) {
      v.input_scale = *p.scale(iname, true);
    } else if (p.checkpoint().find(iname)) {
      // W4A16 under --override-activation-dtype: the activation scale is not used, by design.
      p.acknowledge(iname);
    }
    return v;
  }
};

}  // namespace

const QuantMethod& modelopt_mxfp4_method() {
  static const ModeloptMxfp4Method m;
  return m;
}

}  // namespace fp4lm::model
