// FP8, the same names in both families (ModelOpt "FP8", compressed-tensors float-quantized):
// `<module>.weight` F8_E4M3 [rows, k] with a `weight_scale` per tensor (shape [] / [1]; F32, and
// for compressed-tensors also BF16/F16, which it writes in the model's dtype) or per channel
// ([rows] / [rows, 1], F32/BF16/F16), and a static per-tensor `input_scale`, needed only by the
// W8A8 scheme (fp8): W8A16 (fp8_w8a16, or the W8A16 backends that serve both) never quantizes
// activations. Which key runs a layer: ModelOpt has no weight-only name, so its FP8 modules
// without input_scale run W8A16; compressed-tensors says so in its config (W8A16, W8A8 static:
// input_scale required), and its dynamic per-token W8A8 runs W8A16 — fp4lm has no per-token FP8
// activation kernel; the weights are the file's, the activations stay in the engine's dtype.
// ModelOpt's FP8_PER_CHANNEL_PER_TOKEN (scheme fp8_pc_pt, key fp8_per_token): a per-channel
// weight_scale [rows] and no input_scale; its activations are quantized per token at run time
// (the reference backend, or model::Linear's FP8 pass before the W8A16 backends).
#include <cmath>
#include <optional>
#include <vector>

#include "core/error.h"
#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

namespace {

class Fp8Method final : public QuantMethod {
 public:
  kernels::WeightKey weight_key() const override { return kernels::WeightKey::fp8_static; }

  std::optional<quant::Scheme> detect(const TensorLookup& tensors, const std::string& module) const override {
    if (tensors(module + ".weight") == DType::F8_E4M3) return quant::Scheme::fp8;
    return std::nullopt;
  }

  kernels::QuantKey key(const quant::DiskFormat& f, const std::vector<std::string>& modules,
                        const TensorLookup& tensors) const override {
    if (f.scheme == quant::Scheme::fp8_pc_pt) return kernels::kFp8PerToken;
    if (f.scheme != quant::Scheme::fp8) return kernels::kFp8W8A16;  // fp8_a16, fp8_dynamic
    if (f.family != quant::Family::modelopt) return kernels::kFp8;
    // ModelOpt: W8A8 when any shard carries input_scale (or no tensors are given), else W8A16.
    bool any_input_scale = !tensors;
    for (const std::string& m : modules) any_input_scale |= tensors && tensors(m + ".input_scale").has_value();
    return any_input_scale ? kernels::kFp8 : kernels::kFp8W8A16;
  }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t rows,
                           const LayerScheme& scheme) const override {
    kernels::Fp8View v;
    v.codes = p.require(module + ".weight", {DType::F8_E4M3}, {rows, spec.in_features}).data;
    const TensorView* ws = p.checkpoint().find(module + ".weight_scale");
    if (scheme.on_disk.scheme == quant::Scheme::fp8_pc_pt && ws && ws->shape != Shape{rows} &&
        ws->shape != Shape{rows, 1})
      fail("{}: FP8_PER_CHANNEL_PER_TOKEN layer {} needs a per-channel weight_scale of shape [{}] or [{}, 1], found {}",
           p.where(module + ".weight_scale"), spec.name, rows, rows, shape_str(ws->shape));
    if (ws && rows > 1 && !ws->shape.empty() && ws->shape[0] == rows)
      v.row_scales = row_scales(p, module + ".weight_scale", rows);
    else if (scheme.on_disk.family == quant::Family::compressed_tensors && ws && ws->dtype != DType::F32)
      v.global_scale = row_scales(p, module + ".weight_scale", 1, true)[0];
    else
      v.global_scale = *p.scale(module + ".weight_scale", true);
    if (scheme.key.act == kernels::ActKey::fp8_static) v.input_scale = *p.scale(module + ".input_scale", true);
    return v;
  }

 private:
  // A per-channel scale: [rows] or [rows, 1], F32/BF16/F16, each finite and > 0.
  static std::vector<float> row_scales(const ParamReader& p, const std::string& name, int64_t rows,
                                       bool scalar = false) {
    const TensorView& t = *p.checkpoint().find(name);
    if (scalar && t.shape != Shape{} && t.shape != Shape{1})
      fail("{}: expected a per-tensor scale of shape [1] or [], found {}", p.where(name), shape_str(t.shape));
    if (!scalar && t.shape != Shape{rows} && t.shape != Shape{rows, 1})
      fail("{}: expected a scalar or a per-channel scale of shape [{}] or [{}, 1], found {}", p.where(name), rows,
           rows, shape_str(t.shape));
    p.check(name, t, {DType::F32, DType::BF16, DType::F16}, t.shape);
    p.acknowledge(name);
    std::vector<float> v(static_cast<size_t>(rows));
    to_f32_n(t.data, t.dtype, v.data(), v.size());
    for (int64_t r = 0; r < rows; ++r)
      if (!std::isfinite(v[r]) || v[r] <= 0)
        fail("{}: scale of row {} must be finite and positive, found {}", p.where(name), r, v[r]);
    return v;
  }
};

}  // namespace

const QuantMethod& fp8_method() {
  static const Fp8Method m;
  return m;
}

}  // namespace fp4lm::model
