// LlamaForCausalLM: pre-norm decoder, GQA attention (no bias unless attention_bias), a dense
// SwiGLU MLP in every layer. RoPE scaling "linear" / "llama3" is read by the shared parser.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/mlp.h"

namespace fp4lm::model {

namespace {

class Llama final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "LlamaForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override { read_dense_mlp_keys(r, c); }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    plan_dense_mlp(c, i, fmt::format("model.layers.{}.mlp", i), c.intermediate_size, out);
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return std::make_unique<DenseMlp>(l, fmt::format("model.layers.{}.mlp", i));
  }
  void synthetic_config(const SyntheticOptions&, nlohmann::json&) const override {}
};

}  // namespace

const ArchDef& llama_arch() {
  static const Llama d;
  return d;
}

}  // namespace fp4lm::model
