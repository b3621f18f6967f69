// Qwen2ForCausalLM: Llama's layout with q/k/v biases always (attention_bias is forced on).
#include "model/arch/llama_layout.h"

namespace fp4lm::model {

namespace {

class Qwen2 final : public LlamaLayoutArch {
 public:
  std::string_view hf_name() const override { return "Qwen2ForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_dense_mlp_keys(r, c);
    c.attention_bias = true;
  }
};

}  // namespace

const ArchDef& qwen2_arch() {
  static const Qwen2 d;
  return d;
}

}  // namespace fp4lm::model
