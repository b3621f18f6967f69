// Qwen3ForCausalLM: Llama's layout with per-head q_norm / k_norm RMSNorm before RoPE, no q/k/v
// bias unless attention_bias says so.
#include "model/arch/llama_layout.h"

namespace fp4lm::model {

namespace {

class Qwen3 final : public LlamaLayoutArch {
 public:
  std::string_view hf_name() const override { return "Qwen3ForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_dense_mlp_keys(r, c);
    c.qk_norm = true;
  }
};

}  // namespace

const ArchDef& qwen3_arch() {
  static const Qwen3 d;
  return d;
}

}  // namespace fp4lm::model
