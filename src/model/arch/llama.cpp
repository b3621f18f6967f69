// LlamaForCausalLM: pre-norm decoder, GQA attention (no bias unless attention_bias), a dense
// SwiGLU MLP in every layer. RoPE scaling "linear" / "llama3" is read by the shared parser.
#include "model/arch/llama_layout.h"

namespace fp4lm::model {

namespace {

class Llama final : public LlamaLayoutArch {
 public:
  std::string_view hf_name() const override { return "LlamaForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override { read_dense_mlp_keys(r, c); }
};

}  // namespace

const ArchDef& llama_arch() {
  static const Llama d;
  return d;
}

}  // namespace fp4lm::model
