#include "model/model_limits.h"

#include <cmath>

#include "core/error.h"
#include "model/model_config.h"

namespace fp4lm::model {

namespace {

void at_most(const std::string& path, const char* key, int64_t v, int64_t max) {
  if (v > max) fail("{}: field '{}' is {}, more than the supported maximum {}", path, key, v, max);
}

void finite_positive(const std::string& path, const char* key, double v) {
  if (!(std::isfinite(v) && v > 0.0)) fail("{}: field '{}' must be a finite number > 0, found {}", path, key, v);
}

}  // namespace

void check_model_limits(const ModelConfig& c, const std::string& path) {
  using L = ModelLimits;
  at_most(path, "vocab_size", c.vocab_size, L::vocab_size);
  at_most(path, "hidden_size", c.hidden_size, L::hidden_size);
  at_most(path, "num_hidden_layers", c.num_layers, L::num_hidden_layers);
  at_most(path, "num_attention_heads", c.num_heads, L::num_attention_heads);
  at_most(path, "head_dim", c.head_dim, L::head_dim);
  at_most(path, "intermediate_size", c.intermediate_size, L::intermediate_size);
  at_most(path, "moe_intermediate_size", c.moe.moe_intermediate_size, L::intermediate_size);
  at_most(path, "shared_expert_intermediate_size", c.moe.shared_expert_intermediate_size, L::intermediate_size);
  at_most(path, "num_experts", c.moe.num_experts, L::num_experts);
  at_most(path, "moe_latent_size", c.mamba.moe_latent_size, L::hidden_size);  // a width like hidden_size
  at_most(path, "decoder_sparse_step", c.moe.decoder_sparse_step, L::num_hidden_layers);
  // Gated delta-net dims (the per-sequence state is sized by them): heads like attention heads.
  at_most(path, "linear_num_key_heads", c.gdn.linear_num_key_heads, L::num_attention_heads);
  at_most(path, "linear_num_value_heads", c.gdn.linear_num_value_heads, L::num_attention_heads);
  at_most(path, "linear_key_head_dim", c.gdn.linear_key_head_dim, L::head_dim);
  at_most(path, "linear_value_head_dim", c.gdn.linear_value_head_dim, L::head_dim);
  at_most(path, "linear_conv_kernel_dim", c.gdn.linear_conv_kernel, L::linear_conv_kernel_dim);
  if (c.max_position_embeddings <= 0)
    fail("{}: field 'max_position_embeddings' must be positive, found {}", path, c.max_position_embeddings);
  at_most(path, "max_position_embeddings", c.max_position_embeddings, L::max_position_embeddings);
  if (c.intermediate_size < 0) fail("{}: field 'intermediate_size' must be positive, found {}", path, c.intermediate_size);

  finite_positive(path, "rms_norm_eps", c.rms_norm_eps);
  finite_positive(path, "rope_theta", c.rope_theta);
  const RopeScaling& rs = c.rope_scaling;
  if (!rs.type.empty()) {
    finite_positive(path, "rope_scaling.factor", rs.factor);
    if (rs.type == "llama3") {
      finite_positive(path, "rope_scaling.low_freq_factor", rs.low_freq_factor);
      finite_positive(path, "rope_scaling.high_freq_factor", rs.high_freq_factor);
      // Equal factors leave no band between the kept and the slowed frequencies (Llama 4 Scout
      // publishes 1 and 1; transformers only warns).
      if (!(rs.high_freq_factor >= rs.low_freq_factor))
        fail("{}: rope_scaling.high_freq_factor ({}) must not be less than low_freq_factor ({})", path,
             rs.high_freq_factor, rs.low_freq_factor);
      if (rs.original_max_position_embeddings <= 0)
        fail("{}: field 'rope_scaling.original_max_position_embeddings' must be positive, found {}", path,
             rs.original_max_position_embeddings);
    }
  }

  if (!c.torch_dtype.empty() && c.torch_dtype != "bfloat16" && c.torch_dtype != "float16" &&
      c.torch_dtype != "float32")
    fail("{}: field 'torch_dtype' is '{}', expected bfloat16, float16 or float32 (the dtype of the unquantized "
         "tensors and activations)",
         path, c.torch_dtype);
}

}  // namespace fp4lm::model
