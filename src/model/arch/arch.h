#pragma once
// One definition per HF architecture (one file each in model/arch): what the decoder layers'
// feed-forward blocks are. The rest of a decoder layer — attention with its optional q/k/v bias
// and q_norm/k_norm, RMSNorms, RoPE — follows from the ModelConfig the parser filled per arch.
#include <cstdint>
#include <memory>

#include "model/feed_forward.h"
#include "model/model_config.h"

namespace fp4lm::model {

class ModelLoader;

struct ArchDef {
  Arch arch;
  const char* hf_name;
  // The feed-forward block of decoder layer `layer`.
  std::unique_ptr<FeedForward> (*make_ffn)(ModelLoader& loader, int64_t layer);
};

const ArchDef& llama_arch();      // LlamaForCausalLM
const ArchDef& qwen2_arch();      // Qwen2ForCausalLM
const ArchDef& qwen3_arch();      // Qwen3ForCausalLM
const ArchDef& qwen3_moe_arch();  // Qwen3MoeForCausalLM
const ArchDef& mixtral_arch();    // MixtralForCausalLM
const ArchDef& qwen2_moe_arch();  // Qwen2MoeForCausalLM
const ArchDef& qwen3_5_moe_arch();  // Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration

const ArchDef& arch_def(Arch a);

}  // namespace fp4lm::model
