// The supported architectures, one line each (the order is the one error messages list).
#include "model/arch/arch.h"

namespace fp4lm::model {

const ArchDef& llama_arch();
const ArchDef& qwen2_arch();
const ArchDef& qwen2_vl_arch();
const ArchDef& qwen2_5_vl_arch();
const ArchDef& qwen3_arch();
const ArchDef& qwen3_moe_arch();
const ArchDef& qwen3_vl_arch();
const ArchDef& qwen3_vl_moe_arch();
const ArchDef& mixtral_arch();
const ArchDef& qwen2_moe_arch();
const ArchDef& mistral_arch();
const ArchDef& qwen3_5_arch();
const ArchDef& qwen3_5_vl_arch();
const ArchDef& qwen3_5_moe_arch();
const ArchDef& qwen3_5_moe_vl_arch();
const ArchDef& qwen3_next_arch();
const ArchDef& nemotron_h_arch();
const ArchDef& nemotron_h_vl_arch();
const ArchDef& nemotron_h_omni_arch();
const ArchDef& nemotron_h_omni_v3_arch();
const ArchDef& glm4_moe_arch();
const ArchDef& deepseek_v3_arch();
const ArchDef& glm4_moe_lite_arch();
const ArchDef& deepseek_v32_arch();
const ArchDef& glm_moe_dsa_arch();
const ArchDef& kimi_k25_arch();
const ArchDef& kimi_k25_remote_arch();
const ArchDef& minimax_m2_arch();
const ArchDef& minimax_m3_arch();
const ArchDef& minimax_m3_sparse_arch();
const ArchDef& gemma3_arch();
const ArchDef& gemma3_vl_arch();
const ArchDef& gemma4_arch();
const ArchDef& gemma4_vl_arch();
const ArchDef& gpt_oss_arch();
const ArchDef& phi3_arch();
const ArchDef& llama4_arch();
const ArchDef& llama4_vl_arch();
const ArchDef& deepseek_v4_arch();
const ArchDef& gemma3n_arch();
const ArchDef& gemma3n_vl_arch();
const ArchDef& qwen4_exp_arch();
const ArchDef& qwen4_exp_vl_arch();
const ArchDef& decilm_arch();

const std::vector<const ArchDef*>& architectures() {
  static const std::vector<const ArchDef*> all = {
      &llama_arch(), &qwen2_arch(), &qwen2_vl_arch(), &qwen2_5_vl_arch(),
      &qwen3_arch(), &qwen3_moe_arch(), &qwen3_vl_arch(), &qwen3_vl_moe_arch(),
      &mixtral_arch(), &qwen2_moe_arch(), &mistral_arch(),
      &qwen3_5_arch(), &qwen3_5_vl_arch(), &qwen3_5_moe_arch(), &qwen3_5_moe_vl_arch(),
      &qwen3_next_arch(),
      &nemotron_h_arch(), &nemotron_h_vl_arch(), &nemotron_h_omni_arch(), &nemotron_h_omni_v3_arch(),
      &gemma3_arch(), &gemma3_vl_arch(), &gemma4_arch(), &gemma4_vl_arch(),
      &glm4_moe_arch(), &deepseek_v3_arch(), &kimi_k25_arch(), &kimi_k25_remote_arch(), &glm4_moe_lite_arch(), &minimax_m2_arch(),
      &minimax_m3_arch(), &minimax_m3_sparse_arch(),
      &deepseek_v32_arch(), &glm_moe_dsa_arch(),
      &gpt_oss_arch(),
      &phi3_arch(),
      &llama4_arch(), &llama4_vl_arch(),
      &deepseek_v4_arch(),
      &gemma3n_arch(), &gemma3n_vl_arch(),
      &qwen4_exp_arch(), &qwen4_exp_vl_arch(),
      &decilm_arch(),
  };
  return all;
}

}  // namespace fp4lm::model
