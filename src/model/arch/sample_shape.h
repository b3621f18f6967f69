#pragma once
// The sizes of a small example model of any architecture: what ArchDef::synthetic_config turns
// into that architecture's config.json keys. The synthetic writer (src/synth, a testing library
// above model) fills it; the model library knows nothing else of that writer.
#include <cstdint>
#include <string>

namespace fp4lm::model {

struct SampleShape {
  std::string architecture = "Qwen3MoeForCausalLM";
  int64_t vocab = 256, hidden = 64, layers = 2, heads = 4, kv_heads = 2, head_dim = 16;
  int64_t intermediate = 96;  // dense MLP (and Mixtral experts)
  int64_t experts = 4, top_k = 2, moe_intermediate = 32, shared_expert_intermediate = 48;
  // Qwen3.5-MoE hybrid: gated delta-net dims; layer i is full attention iff (i+1) % interval == 0.
  int64_t linear_key_heads = 2, linear_value_heads = 4, linear_key_head_dim = 16, linear_value_head_dim = 16;
  int64_t conv_kernel = 4, full_attention_interval = 2;
  // Nemotron-H: the layer pattern (M Mamba-2, * attention, - MLP, E MoE; extended with M-M* to
  // `layers`) and the Mamba-2 dims (conv_kernel above).
  std::string hybrid_pattern = "M*M-";
  int64_t mamba_heads = 4, mamba_head_dim = 8, ssm_state = 16, mamba_groups = 2;
  int64_t moe_latent = 0;  // moe_latent_size of the 'E' layers (0: none)
  // Gemma 4: num_kv_shared_layers (the last layers read the K/V of earlier ones; 0: none).
  int64_t kv_shared_layers = 0;
  // Gemma 4: hidden_size_per_layer_input (per-layer input embeddings, the E2B / E4B form; 0: none).
  int64_t ple_dim = 0;
};

}  // namespace fp4lm::model
