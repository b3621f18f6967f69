#include "model/layer_scheme.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <tuple>

#include "core/error.h"
#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

using quant::Scheme;

quant::ModuleTensors module_tensors(quant::Family family, const TensorLookup& tensors) {
  quant::ModuleTensors t;
  if (!tensors) return t;
  t.dtype = tensors;
  t.scheme = [family, tensors](const std::string& module) { return detect_scheme(family, tensors, module); };
  return t;
}

namespace {

// The scheme every shard of `spec` resolves to by `scheme_of`; an Error naming the first two
// that differ (`differ`: how the message says so).
template <class SchemeOf>
Scheme shards_agree(const quant::QuantConfig& q, const LayerSpec& spec, const char* differ, SchemeOf&& scheme_of) {
  const std::vector<std::string> modules = spec.modules();
  const Scheme first = scheme_of(modules.front());
  for (const std::string& m : modules)
    if (const Scheme s = scheme_of(m); s != first)
      fail("{}: the shards of {} {} ({} is {}, {} is {})", q.source(), spec.name, differ, modules.front(),
           quant::scheme_name(first), m, quant::scheme_name(s));
  return first;
}

}  // namespace

Scheme layer_on_disk_scheme(const quant::QuantConfig& q, const LayerSpec& spec, const TensorLookup& tensors) {
  if (!q.quantized() || spec.tied_embedding) return Scheme::unquantized;
  const quant::ModuleTensors t = module_tensors(q.family(), tensors);
  // Routers (and the GDN's in_proj_b / in_proj_a) are normally stored unquantized and left out
  // of the configs; some exports of the Qwen3.5 hybrids quantize in_proj_a/b all the same. Their
  // tensors decide.
  if (spec.router) {
    if (!tensors) return Scheme::unquantized;
    return shards_agree(q, spec, "are stored in different formats", [&](const std::string& m) { return t.scheme(m); });
  }
  if (std::optional<Scheme> listed = q.listed_scheme(spec.name)) return *listed;

  if (q.exclusions_decide()) {
    std::vector<std::string> excluded, kept;
    for (const std::string& m : spec.modules()) (q.excluded(m) ? excluded : kept).push_back(m);
    if (!excluded.empty() && !kept.empty())
      fail("{}: some but not all shards of {} are excluded (excluded: {}; not excluded: {})", q.source(), spec.name,
           fmt::join(excluded, ", "), fmt::join(kept, ", "));
  }
  return shards_agree(q, spec, "resolve to different quantization algorithms",
                      [&](const std::string& m) { return q.module_scheme(m, t); });
}

std::string config_warning(const quant::QuantConfig& q, const std::vector<LayerSpec>& layers,
                           const TensorLookup& tensors) {
  std::vector<std::string> modules;
  for (const LayerSpec& spec : layers) {
    if (spec.router || spec.tied_embedding) continue;
    for (const std::string& m : spec.modules()) modules.push_back(m);
  }
  return q.warning(modules, module_tensors(q.family(), tensors));
}

LayerScheme resolve_scheme(const quant::QuantConfig& q, const LayerSpec& spec, const EngineOptions& opts,
                           DType engine_dtype, const TensorLookup& tensors) {
  LayerScheme s;
  s.on_disk = {q.family(), layer_on_disk_scheme(q, spec, tensors)};
  if (s.on_disk.scheme == Scheme::fp8_block || s.on_disk.scheme == Scheme::fp8_block_a16 ||
      s.on_disk.scheme == Scheme::mxfp8)
    std::tie(s.on_disk.block_n, s.on_disk.block_k) = q.weight_block(spec.modules().front());
  if (s.on_disk.scheme == Scheme::int4) s.on_disk.int4 = q.int4_layout(spec.modules().front());
  s.act_dtype = engine_dtype;
  const QuantMethod& method = quant_method(s.on_disk);
  s.key = method.key(s.on_disk, spec.modules(), tensors);
  if (spec.f32_act && s.on_disk.scheme == Scheme::unquantized) s.act_dtype = DType::F32;
  if ((s.key == kernels::kNvfp4W4A4 || s.key == kernels::kNvfp4W4A8 || s.key == kernels::kFp8PerToken ||
       s.key == kernels::kMxfp8 || s.key == kernels::kInt8W8A8 || s.key == kernels::kMxfp4W4A8 ||
       s.key == kernels::kMxfp4W4A8Dynamic) &&
      opts.override_activation_dtype) {
    // Passing no activation key is what selects the W4A16 backends (docs/ARCHITECTURE.md, "Loading a model").
    s.key = {s.key.weight, kernels::ActKey::none};
    s.act_dtype = *opts.override_activation_dtype;
  }
  s.dynamic_activation_scale = s.key == kernels::kNvfp4W4A4 && opts.dynamic_activation_scale;
  if (method.weight_key() != s.key.weight)
    fail("{}: layer {} is stored as {} {} but would run on {} weights", q.source(), spec.name,
         quant::family_name(s.on_disk.family), quant::scheme_name(s.on_disk.scheme),
         kernels::weight_key_name(s.key.weight));
  return s;
}

}  // namespace fp4lm::model
