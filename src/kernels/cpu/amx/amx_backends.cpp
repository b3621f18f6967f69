// Registration of the AMX backends (Intel Xeon 4th gen and later), each after its AVX-512
// sibling in the oracle's table (docs/KERNELS.md, "AMX", for why they are not yet first):
//  - `cpu_w4a16_amx`: NVFP4 (and MXFP4) weights decoded to exact bf16 panels, TDPBF16PS, the FP32
//    global scale in the epilogue (amx/nvfp4_w4a16.cpp);
//  - `cpu_dense_amx`: unquantized BF16 weights by TDPBF16PS, F32/F16 rows by the AVX-512 kernel
//    (amx/dense.cpp).
// Available when the CPU has the tile features and avx512bf16, the build has the AMX kernels,
// FP4LM_DISABLE_ISA names neither amx nor a set below it, and Linux grants the tile state.
#include "kernels/cpu/amx_kernels.h"
#include "kernels/cpu/amx_tile_permission.h"
#include "kernels/cpu/backend_factory.h"

namespace fp4lm::kernels {

namespace {

constexpr IsaNeeds kNeeds{Isa::amx, kAmxBf16Features};

Backend with_permission(Backend b) {
  b.unavailable_reason = [] {
    if (std::string why = isa_unavailable_reason(kNeeds); !why.empty()) return why;
    return cpu::amx_tile_permission_reason();
  };
  return b;
}

Backend nvfp4(LayerKind kind) {
  return with_permission(
      cpu::nvfp4_cpu_backend("cpu_w4a16_amx", kind, cpu::Nvfp4Mode::w4a16, cpu::nvfp4_kernels_amx(), kNeeds));
}

Backend dense(LayerKind kind) {
  return with_permission(cpu::dense_cpu_backend("cpu_dense_amx", kind, cpu::dense_kernels_amx(), kNeeds));
}

}  // namespace

const Backend& cpu_w4a16_amx_linear_backend() {
  static const Backend b = nvfp4(LayerKind::linear);
  return b;
}

const Backend& cpu_w4a16_amx_moe_backend() {
  static const Backend b = nvfp4(LayerKind::moe);
  return b;
}

const Backend& cpu_dense_amx_linear_backend() {
  static const Backend b = dense(LayerKind::linear);
  return b;
}

const Backend& cpu_dense_amx_moe_backend() {
  static const Backend b = dense(LayerKind::moe);
  return b;
}

}  // namespace fp4lm::kernels
