#include "model/layer_scheme.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace fp4lm::model {

using quant::QuantAlgo;

QuantAlgo layer_on_disk_algo(const quant::QuantConfig& q, const LayerSpec& spec) {
  if (!q.quantized() || spec.router || spec.tied_embedding) return QuantAlgo::None;
  // MIXED_PRECISION may list the engine's own (fused) name.
  if (q.algo == QuantAlgo::MIXED_PRECISION && q.quantized_layers.count(spec.name) &&
      !quant::is_excluded(q.exclude_modules, spec.name))
    return q.quantized_layers.at(spec.name).algo;

  const std::vector<std::string> modules = spec.modules();
  std::vector<std::string> excluded, kept;
  for (const std::string& m : modules) (quant::is_excluded(q.exclude_modules, m) ? excluded : kept).push_back(m);
  if (!excluded.empty() && !kept.empty())
    fail("{}: some but not all shards of {} are excluded (excluded: {}; not excluded: {})", q.source, spec.name,
         fmt::join(excluded, ", "), fmt::join(kept, ", "));

  QuantAlgo algo = quant::module_algo(q, modules.front());
  for (const std::string& m : modules) {
    QuantAlgo a = quant::module_algo(q, m);
    if (a != algo)
      fail("{}: the shards of {} resolve to different quantization algorithms ({} is {}, {} is {})", q.source,
           spec.name, modules.front(), quant::algo_name(algo), m, quant::algo_name(a));
  }
  return algo;
}

LayerScheme resolve_scheme(const quant::QuantConfig& q, const LayerSpec& spec, const EngineOptions& opts,
                           DType engine_dtype) {
  LayerScheme s;
  s.on_disk = layer_on_disk_algo(q, spec);
  s.act_dtype = engine_dtype;
  switch (s.on_disk) {
    case QuantAlgo::None: s.key = kernels::kUnquantized; break;
    case QuantAlgo::W4A16_NVFP4: s.key = kernels::kNvfp4W4A16; break;
    case QuantAlgo::FP8: s.key = kernels::kFp8; break;
    case QuantAlgo::NVFP4:
      if (opts.override_activation_dtype) {
        // Passing no activation key is what selects the W4A16 backends (DESIGN.md §2).
        s.key = kernels::kNvfp4W4A16;
        s.act_dtype = *opts.override_activation_dtype;
      } else {
        s.key = kernels::kNvfp4W4A4;
      }
      break;
    case QuantAlgo::MIXED_PRECISION:
      fail("{}: layer {} resolved to MIXED_PRECISION itself", q.source, spec.name);
  }
  return s;
}

}  // namespace fp4lm::model
