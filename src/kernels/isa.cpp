#include "kernels/isa.h"

#include <fmt/format.h>

#include <cstdlib>

#include "core/error.h"

namespace fp4lm::kernels {

namespace {

constexpr Isa kAll[] = {Isa::portable, Isa::avx2, Isa::avx512, Isa::amx};

std::optional<Isa> parse_override() {
  const char* v = std::getenv("FP4LM_DISABLE_ISA");
  if (!v || !*v) return std::nullopt;
  for (Isa isa : kAll)
    if (isa != Isa::portable && isa_name(isa) == v) return isa;
  fail("FP4LM_DISABLE_ISA={}: not an instruction set that can be switched off (expected avx2, avx512 or amx)", v);
}

// Whether `isa` is `off` or built on it.
bool built_on(Isa isa, Isa off) {
  for (;; isa = isa_base(isa)) {
    if (isa == off) return true;
    if (isa == Isa::portable) return false;
  }
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::portable: return "portable";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::amx: return "amx";
  }
  return "?";
}

Isa isa_base(Isa isa) {
  switch (isa) {
    case Isa::amx: return Isa::avx512;
    case Isa::avx512: return Isa::avx2;
    case Isa::avx2:
    case Isa::portable: return Isa::portable;
  }
  return Isa::portable;
}

bool isa_built(Isa isa) {
  switch (isa) {
    case Isa::portable: return true;
    case Isa::avx2:
#ifdef FP4LM_HAVE_AVX2_KERNELS
      return true;
#else
      return false;
#endif
    case Isa::avx512:
#ifdef FP4LM_HAVE_AVX512_KERNELS
      return true;
#else
      return false;
#endif
    case Isa::amx:
#ifdef FP4LM_HAVE_AMX_KERNELS
      return true;
#else
      return false;
#endif
  }
  return false;
}

std::optional<Isa> disabled_isa() {
  static const std::optional<Isa> off = parse_override();
  return off;
}

std::string isa_unavailable_reason(const IsaNeeds& needs) {
  if (const std::optional<Isa> off = disabled_isa(); off && built_on(needs.isa, *off))
    return fmt::format("disabled by FP4LM_DISABLE_ISA={}", isa_name(*off));
  if (!isa_built(needs.isa)) {
    if (needs.isa == Isa::avx512 && isa_built(Isa::avx2))
      return "built without the AVX-512 kernels (the compiler lacks one of -mavx512{f,bw,vl,vbmi,vnni,bf16})";
    if (needs.isa == Isa::amx && isa_built(Isa::avx512))
      return "built without the AMX kernels (the compiler lacks one of -mamx-{tile,bf16,int8})";
    return fmt::format("built without the {} kernels (not an x86 build, or FP4LM_FORCE_PORTABLE)", isa_name(needs.isa));
  }
  const CpuFeatures& cpu = cpu_features();
  if (const CpuFeatureSet missing = needs.cpu.minus(cpu.features); !missing.empty())
    return fmt::format("CPU lacks {} (detected: {})", missing.names(), cpu.describe());
  return "";
}

}  // namespace fp4lm::kernels
