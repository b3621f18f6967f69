#pragma once
// The sane range of every number a config.json gives the engine. A config is a small file that
// decides how much memory is allocated, so each dimension has a stated maximum well above every
// published model (a config beyond it is refused with its field named, never a bad_alloc), and
// each float that a forward divides by or takes a logarithm of must be finite and positive.
// (What the tensors on disk hold is checked against these dimensions by the loader, tensor by
// tensor, before anything sized by them is allocated.)
#include <cstdint>
#include <string>

namespace fp4lm::model {

struct ModelConfig;

struct ModelLimits {
  static constexpr int64_t vocab_size = int64_t{1} << 24;               // 16.7M (largest published: 262k)
  static constexpr int64_t hidden_size = 65536;                         // (largest: 18432)
  static constexpr int64_t num_hidden_layers = 1024;                    // (largest: 126)
  static constexpr int64_t num_attention_heads = 1024;                  // (largest: 128)
  static constexpr int64_t head_dim = 1024;                             // (largest: 256)
  static constexpr int64_t intermediate_size = int64_t{1} << 20;        // also MoE / shared expert
  static constexpr int64_t num_experts = 4096;                          // (largest: 512)
  static constexpr int64_t max_position_embeddings = int64_t{1} << 26;  // 67M (largest: 10M)
  static constexpr int64_t linear_conv_kernel_dim = 64;                 // GDN conv (published: 4)
};

// Error "<path>: field 'F' must be ..., found V" for the first value outside its range.
void check_model_limits(const ModelConfig& c, const std::string& path);

}  // namespace fp4lm::model
