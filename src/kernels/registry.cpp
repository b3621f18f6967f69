#include "kernels/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

namespace fp4lm::kernels {

// Each backend file defines one of these; the table below is the only place listing them. The
// x86 ones (kernels/cpu/avx2/, kernels/cpu/avx512/) exist in x86 builds only.
#ifdef FP4LM_HAVE_AVX2_KERNELS
const Backend& cpu_w4a4_avx512_gemm_linear_backend();
const Backend& cpu_w4a4_avx512_linear_backend();
const Backend& cpu_w4a16_avx512_linear_backend();
const Backend& cpu_w4a16_avx512_gemm_linear_backend();
const Backend& cpu_w4a4_avx2_linear_backend();
const Backend& cpu_w4a16_avx2_linear_backend();
const Backend& cpu_dense_avx512_linear_backend();
const Backend& cpu_dense_avx2_linear_backend();
const Backend& cpu_fp8_w8a16_avx512_linear_backend();
const Backend& cpu_fp8_w8a16_avx2_linear_backend();
const Backend& cpu_w4a4_avx512_gemm_moe_backend();
const Backend& cpu_w4a4_avx512_moe_backend();
const Backend& cpu_w4a16_avx512_moe_backend();
const Backend& cpu_w4a16_avx512_gemm_moe_backend();
const Backend& cpu_w4a4_avx2_moe_backend();
const Backend& cpu_w4a16_avx2_moe_backend();
const Backend& cpu_dense_avx512_moe_backend();
const Backend& cpu_dense_avx2_moe_backend();
const Backend& cpu_fp8_w8a16_avx512_moe_backend();
const Backend& cpu_fp8_w8a16_avx2_moe_backend();
const Backend& cpu_int4_w4a16_avx512_linear_backend();
const Backend& cpu_int4_w4a16_avx2_linear_backend();
const Backend& cpu_int4_w4a16_avx512_moe_backend();
const Backend& cpu_int4_w4a16_avx2_moe_backend();
const Backend& cpu_int8_w8a16_avx2_linear_backend();
const Backend& cpu_int8_w8a16_avx2_moe_backend();
#endif
#ifdef FP4LM_HAVE_AMX_KERNELS  // kernels/cpu/amx/ (built when the compiler takes -mamx-*)
const Backend& cpu_w4a16_amx_linear_backend();
const Backend& cpu_w4a16_amx_moe_backend();
const Backend& cpu_dense_amx_linear_backend();
const Backend& cpu_dense_amx_moe_backend();
#endif
const Backend& reference_linear_backend();
const Backend& reference_moe_backend();

namespace {

// Priority order: the first available backend that accepts a layer wins.
std::vector<const Backend*> table() {
  return {
#ifdef FP4LM_HAVE_AVX2_KERNELS
      &cpu_w4a4_avx512_gemm_linear_backend(),
      &cpu_w4a4_avx512_linear_backend(),
      &cpu_w4a16_avx512_gemm_linear_backend(),
      &cpu_w4a16_avx512_linear_backend(),
#ifdef FP4LM_HAVE_AMX_KERNELS  // after AVX-512: chosen by name only for now (docs/KERNELS.md, "AMX")
      &cpu_w4a16_amx_linear_backend(),
#endif
      &cpu_w4a4_avx2_linear_backend(),
      &cpu_w4a16_avx2_linear_backend(),
      &cpu_dense_avx512_linear_backend(),
#ifdef FP4LM_HAVE_AMX_KERNELS
      &cpu_dense_amx_linear_backend(),
#endif
      &cpu_dense_avx2_linear_backend(),
      &cpu_fp8_w8a16_avx512_linear_backend(),
      &cpu_fp8_w8a16_avx2_linear_backend(),
      &cpu_int4_w4a16_avx512_linear_backend(),
      &cpu_int4_w4a16_avx2_linear_backend(),
      &cpu_int8_w8a16_avx2_linear_backend(),
#endif
      &reference_linear_backend(),
#ifdef FP4LM_HAVE_AVX2_KERNELS
      &cpu_w4a4_avx512_gemm_moe_backend(),
      &cpu_w4a4_avx512_moe_backend(),
      &cpu_w4a16_avx512_gemm_moe_backend(),
      &cpu_w4a16_avx512_moe_backend(),
#ifdef FP4LM_HAVE_AMX_KERNELS
      &cpu_w4a16_amx_moe_backend(),
#endif
      &cpu_w4a4_avx2_moe_backend(),
      &cpu_w4a16_avx2_moe_backend(),
      &cpu_dense_avx512_moe_backend(),
#ifdef FP4LM_HAVE_AMX_KERNELS
      &cpu_dense_amx_moe_backend(),
#endif
      &cpu_dense_avx2_moe_backend(),
      &cpu_fp8_w8a16_avx512_moe_backend(),
      &cpu_fp8_w8a16_avx2_moe_backend(),
      &cpu_int4_w4a16_avx512_moe_backend(),
      &cpu_int4_w4a16_avx2_moe_backend(),
      &cpu_int8_w8a16_avx2_moe_backend(),
#endif
      &reference_moe_backend(),
  };
}

std::string kind_name(LayerKind k) { return k == LayerKind::linear ? "Linear" : "MoE"; }

std::vector<std::string> names_of(LayerKind kind) {
  std::vector<std::string> names;
  for (const Backend* b : backends(kind)) names.push_back(b->name);
  return names;
}

template <typename Problem>
std::string common_rejection(const Backend& b, const Problem& p) {
  if (b.unavailable_reason) {
    if (std::string why = b.unavailable_reason(); !why.empty()) return "unavailable: " + why;
  }
  if (!b.supports(p.key))
    return fmt::format("does not support scheme {} (weight={}, activation={})", scheme_name(p.key),
                       weight_key_name(p.key.weight), act_key_name(p.key.act));
  if (std::find(b.act_dtypes.begin(), b.act_dtypes.end(), p.act_dtype) == b.act_dtypes.end())
    return fmt::format("does not support activation dtype {}", dtype_torch_name(p.act_dtype));
  return "";
}

// The potential backends of a layer: every backend of its kind that runs its weight format
// (whatever activation key it wants), in table order.
std::vector<std::string> candidates_for(LayerKind kind, WeightKey weight) {
  std::vector<std::string> out;
  for (const Backend* b : backends(kind))
    for (const QuantKey& k : b->schemes)
      if (k.weight == weight) {
        out.push_back(b->name);
        break;
      }
  return out;
}

template <typename Problem>
Selection select(LayerKind kind, const Problem& p, const std::string& layer, const std::string& forced) {
  Selection s;
  s.candidates = candidates_for(kind, p.key.weight);
  if (!forced.empty()) {
    const Backend* b = find_backend(forced, kind);
    if (!b)
      usage_fail("unknown {} backend '{}' (available names: {})", kind_name(kind), forced,
                 fmt::join(names_of(kind), ", "));
    s.forced_rejection = rejection_reason(*b, p);
    if (s.forced_rejection.empty()) {
      s.backend = b;
      return s;
    }
    log().debug("forced {} backend '{}' cannot run layer {}: {}", kind_name(kind), forced, layer, s.forced_rejection);
  }
  std::vector<std::string> reasons;
  for (const Backend* b : backends(kind)) {
    std::string why = rejection_reason(*b, p);
    if (why.empty()) {
      s.backend = b;
      return s;
    }
    log().debug("{} backend '{}' rejected for {}: {}", kind_name(kind), b->name, layer, why);
    reasons.push_back(fmt::format("{}: {}", b->name, why));
  }
  fail("no {} backend can run layer {} (scheme {}, activation dtype {}): {}", kind_name(kind), layer,
       scheme_name(p.key), dtype_torch_name(p.act_dtype), fmt::join(reasons, "; "));
}

}  // namespace

bool Backend::supports(QuantKey key) const {
  for (const QuantKey& s : schemes) {
    if (s == key) return true;
    if (weight_key_only && s.weight == key.weight) return true;
  }
  return false;
}

std::vector<const Backend*> all_backends() { return table(); }

std::vector<const Backend*> backends(LayerKind kind) {
  std::vector<const Backend*> out;
  for (const Backend* b : table())
    if (b->kind == kind) out.push_back(b);
  return out;
}

const Backend* find_backend(const std::string& name, LayerKind kind) {
  for (const Backend* b : backends(kind))
    if (b->name == name) return b;
  return nullptr;
}

std::string rejection_reason(const Backend& b, const LinearProblem& p) {
  if (b.kind != LayerKind::linear) return "not a Linear backend";
  if (std::string why = common_rejection(b, p); !why.empty()) return why;
  return b.check_linear ? b.check_linear(p) : "";
}

std::string rejection_reason(const Backend& b, const MoeProblem& p) {
  if (b.kind != LayerKind::moe) return "not a MoE backend";
  if (std::string why = common_rejection(b, p); !why.empty()) return why;
  return b.check_moe ? b.check_moe(p) : "";
}

Selection select_linear(const LinearProblem& p, const std::string& layer, const std::string& forced) {
  return select(LayerKind::linear, p, layer, forced);
}

Selection select_moe(const MoeProblem& p, const std::string& layer, const std::string& forced) {
  return select(LayerKind::moe, p, layer, forced);
}

std::string selection_message(const Selection& s, LayerKind kind, QuantKey key) {
  std::string format = key.weight == WeightKey::nvfp4_static ? "NVFP4 "
                       : key.weight == WeightKey::fp8_static ? "FP8 "
                       : key.weight == WeightKey::fp8_block  ? "block-FP8 "
                       : key.weight == WeightKey::mxfp4      ? "MXFP4 "
                       : key.weight == WeightKey::int4       ? "int4 "
                       : key.weight == WeightKey::int8       ? "int8 "
                                                             : "unquantized ";
  return fmt::format("Using '{}' {}{} backend out of potential backends: [{}]", s.backend->name, format,
                     kind_name(kind), fmt::join(s.candidates, ", "));
}

}  // namespace fp4lm::kernels
