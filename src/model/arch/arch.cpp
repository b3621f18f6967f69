#include "model/arch/arch.h"

#include "core/error.h"

namespace fp4lm::model {

const ArchDef& arch_def(Arch a) {
  switch (a) {
    case Arch::Llama: return llama_arch();
    case Arch::Qwen2: return qwen2_arch();
    case Arch::Qwen3: return qwen3_arch();
    case Arch::Qwen3Moe: return qwen3_moe_arch();
    case Arch::Mixtral: return mixtral_arch();
    case Arch::Qwen2Moe: return qwen2_moe_arch();
    case Arch::Qwen3_5Moe: return qwen3_5_moe_arch();
  }
  fail("unknown architecture enum value {}", static_cast<int>(a));
}

}  // namespace fp4lm::model
