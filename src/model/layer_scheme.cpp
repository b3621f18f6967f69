#include "model/layer_scheme.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "core/error.h"

namespace fp4lm::model {

using quant::QuantAlgo;

namespace {

// A module's algorithm under q, with modules the two files resolve differently decided by
// their tensors.
bool stored_unquantized(const TensorLookup& tensors, const std::string& module) {
  const std::optional<DType> w = tensors(module + ".weight");
  return (w == DType::BF16 || w == DType::F16 || w == DType::F32) && !tensors(module + ".weight_scale");
}

QuantAlgo module_algo_on_disk(const quant::QuantConfig& q, const std::string& module, const TensorLookup& tensors) {
  const QuantAlgo a = quant::module_algo(q, module);
  // A file that lists no exclusions (Nemotron-style minimal): what is stored unquantized
  // (lm_head, typically) is excluded.
  if (!q.exclusions_listed && a != QuantAlgo::None && tensors && stored_unquantized(tensors, module))
    return QuantAlgo::None;
  if (!q.other) return a;
  const QuantAlgo b = quant::module_algo(*q.other, module);
  if (a == b) return a;
  if (!tensors)
    fail("{}: the config files disagree on {} ({} vs {}) and no tensors were given to decide", q.source, module,
         quant::algo_name(a), quant::algo_name(b));
  return tensor_algo(tensors, module);
}

}  // namespace

QuantAlgo tensor_algo(const TensorLookup& tensors, const std::string& module) {
  const std::optional<DType> w = tensors(module + ".weight");
  if (w == DType::F8_E4M3) return QuantAlgo::FP8;
  if (w == DType::U8 && tensors(module + ".weight_scale") == DType::F8_E4M3)
    return tensors(module + ".input_scale") ? QuantAlgo::NVFP4 : QuantAlgo::W4A16_NVFP4;
  return QuantAlgo::None;
}

// The algorithm every shard of `spec` resolves to by `algo_of`; an Error naming the first two
// that differ (`differ`: how the message says so).
template <class AlgoOf>
QuantAlgo shards_agree(const quant::QuantConfig& q, const LayerSpec& spec, const char* differ, AlgoOf&& algo_of) {
  const std::vector<std::string> modules = spec.modules();
  const QuantAlgo algo = algo_of(modules.front());
  for (const std::string& m : modules)
    if (const QuantAlgo a = algo_of(m); a != algo)
      fail("{}: the shards of {} {} ({} is {}, {} is {})", q.source, spec.name, differ, modules.front(),
           quant::algo_name(algo), m, quant::algo_name(a));
  return algo;
}

QuantAlgo layer_on_disk_algo(const quant::QuantConfig& q, const LayerSpec& spec, const TensorLookup& tensors) {
  if (!q.quantized() || spec.tied_embedding) return QuantAlgo::None;
  // Routers (and the GDN's in_proj_b / in_proj_a) are in neither list of ModelOpt's configs and
  // normally stored unquantized; some exports of the Qwen3.5 hybrids quantize in_proj_a/b all
  // the same. Their tensors decide.
  if (spec.router) {
    if (!tensors) return QuantAlgo::None;
    return shards_agree(q, spec, "are stored in different formats",
                        [&](const std::string& m) { return tensor_algo(tensors, m); });
  }
  // MIXED_PRECISION may list the engine's own (fused) name.
  if (q.algo == QuantAlgo::MIXED_PRECISION && !q.other && q.quantized_layers.count(spec.name) &&
      !quant::is_excluded(q.exclude_modules, spec.name))
    return q.quantized_layers.at(spec.name).algo;

  const std::vector<std::string> modules = spec.modules();
  if (q.other || !q.exclusions_listed) {
    // The files disagree: per module, the tensors decide wherever they do (the shards must
    // still agree).
    return shards_agree(q, spec, "resolve to different quantization algorithms",
                        [&](const std::string& m) { return module_algo_on_disk(q, m, tensors); });
  }
  std::vector<std::string> excluded, kept;
  for (const std::string& m : modules) (quant::is_excluded(q.exclude_modules, m) ? excluded : kept).push_back(m);
  if (!excluded.empty() && !kept.empty())
    fail("{}: some but not all shards of {} are excluded (excluded: {}; not excluded: {})", q.source, spec.name,
         fmt::join(excluded, ", "), fmt::join(kept, ", "));

  return shards_agree(q, spec, "resolve to different quantization algorithms",
                      [&](const std::string& m) { return quant::module_algo(q, m); });
}

std::string disagreement_warning(const quant::QuantConfig& q, const std::vector<LayerSpec>& layers,
                                 const TensorLookup& tensors) {
  if (!q.other) return "";
  std::map<std::string, int64_t> chosen;  // "A in config.json, B in hf_quant_config.json -> C" -> modules
  std::string example;
  for (const LayerSpec& spec : layers) {
    if (spec.router || spec.tied_embedding) continue;
    for (const std::string& m : spec.modules()) {
      const QuantAlgo a = quant::module_algo(q, m), b = quant::module_algo(*q.other, m);
      if (a == b) continue;
      const QuantAlgo t = tensors ? tensor_algo(tensors, m) : a;
      ++chosen[fmt::format("{} per {}, {} per {} -> {}", quant::algo_name(a), "config.json",
                           quant::algo_name(b), "hf_quant_config.json", quant::algo_name(t))];
      if (example.empty()) example = m;
    }
  }
  std::string what;
  for (const auto& [k, n] : chosen) what += fmt::format("{}{} module(s) {}", what.empty() ? "" : "; ", n, k);
  if (what.empty()) what = "no module of the model is affected";
  else what += fmt::format(" (e.g. {})", example);
  return fmt::format("{} and {} disagree ({}); using config.json's quantization_config (as vLLM does), and where "
                     "the two resolve a module differently its tensors decide (input_scale present: W4A4/W8A8, "
                     "absent: weight-only): {}",
                     q.source, q.other->source, q.disagreement, what);
}

LayerScheme resolve_scheme(const quant::QuantConfig& q, const LayerSpec& spec, const EngineOptions& opts,
                           DType engine_dtype, const TensorLookup& tensors) {
  LayerScheme s;
  s.on_disk = layer_on_disk_algo(q, spec, tensors);
  s.act_dtype = engine_dtype;
  switch (s.on_disk) {
    case QuantAlgo::None: s.key = kernels::kUnquantized; break;
    case QuantAlgo::W4A16_NVFP4: s.key = kernels::kNvfp4W4A16; break;
    case QuantAlgo::FP8: {
      // ModelOpt has no weight-only FP8 name: FP8 modules without input_scale can only be W8A16.
      bool any_input_scale = !tensors;
      for (const std::string& m : spec.modules()) any_input_scale |= tensors && tensors(m + ".input_scale").has_value();
      s.key = any_input_scale ? kernels::kFp8 : kernels::kFp8W8A16;
      break;
    }
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
