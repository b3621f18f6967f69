#pragma once
// The architecture facts of an HF config.json, validated once, for every supported model: the
// shared keys here, each architecture's own keys by its ArchDef (model/arch/). The fields are
// the parameters of the shared building blocks (attention, MLP, MoE) the ArchDefs assemble.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp4lm::model {

class ArchDef;
struct ConfigReader;

struct RopeScaling {
  std::string type;  // "" (none), "linear", "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;       // llama3
};

struct ModelConfig {
  const ArchDef* arch = nullptr;  // the architecture's definition (static, never null once parsed)
  std::string architecture;       // HF name, e.g. "Qwen3MoeForCausalLM"
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t intermediate_size = 0;  // dense MLP (and Qwen2-MoE dense layers)
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (Qwen2 always)
  bool qk_norm = false;         // Qwen3 / Qwen3-MoE per-head q_norm, k_norm
  // MoE
  int64_t num_experts = 0, top_k = 0, moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  int64_t shared_expert_intermediate_size = 0;  // Qwen2-MoE
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
  std::string torch_dtype;  // "bfloat16", ... ("" when absent)

  bool is_moe() const { return num_experts > 0; }
  // Whether decoder layer i has a sparse MoE block (else a dense MLP).
  bool layer_is_moe(int64_t i) const;
};

// Throws Error naming config.json (`path`) and the field for a missing/invalid field or an
// unsupported architecture or field value.
ModelConfig parse_model_config(const nlohmann::json& config, const std::string& path);

// Keys shared by several architectures, for their ArchDef::parse_config.
// A dense MLP in every layer: intermediate_size (required, positive).
void read_dense_mlp_keys(const ConfigReader& r, ModelConfig& c);
// The Qwen MoE family's keys: num_experts, num_experts_per_tok, moe_intermediate_size,
// norm_topk_prob (default `norm_topk_default`), decoder_sparse_step, intermediate_size (for
// dense layers) and mlp_only_layers.
void read_sparse_moe_keys(const ConfigReader& r, ModelConfig& c, bool norm_topk_default);

}  // namespace fp4lm::model
