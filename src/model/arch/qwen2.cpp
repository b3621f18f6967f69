// Qwen2ForCausalLM: Llama's layout with q/k/v biases always (attention_bias is forced on).
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/mlp.h"

namespace fp4lm::model {

namespace {

class Qwen2 final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "Qwen2ForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_dense_mlp_keys(r, c);
    c.attention_bias = true;
  }
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

const ArchDef& qwen2_arch() {
  static const Qwen2 d;
  return d;
}

}  // namespace fp4lm::model
