// Qwen3_5ForCausalLM / Qwen3_5ForConditionalGeneration (dense Qwen3.5, e.g. 27B; the VL form's
// keys under text_config and tensors under model.language_model., see parse_model_config): the
// hybrid of arch/gated_hybrid.h — gated delta-net (separate in_proj_qkv / in_proj_z /
// in_proj_b / in_proj_a, as Qwen3.5-MoE) or gated full attention per layer_types — with a plain
// SwiGLU MLP (mlp.{gate,up,down}_proj, intermediate_size) in every layer instead of the MoE.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/arch/gated_hybrid.h"
#include "model/layers/mlp.h"
#include "model/load/model_loader.h"
#include "model/vision/qwen3_5_vision_tower.h"

namespace fp4lm::model {

namespace {

class Qwen3_5 final : public GatedHybridArch {
 public:
  explicit Qwen3_5(const char* name) : name_(name) {}
  std::string_view hf_name() const override { return name_; }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_gated_hybrid_keys(r, c);
    read_dense_mlp_keys(r, c);
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_gated_hybrid_mixer(c, i, out);
    plan_dense_mlp(c, i, fmt::format("model.layers.{}.mlp", i), c.intermediate_size, out);
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return std::make_unique<DenseMlp>(l, fmt::format("model.layers.{}.mlp", i));
  }

  // The VL form's model.visual.* (vision_config); nullptr for a text-only checkpoint.
  std::unique_ptr<ImageEncoder> load_image_encoder(ModelLoader& l) const override {
    return Qwen3_5VisionTower::load(l);
  }

  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["model_type"] = "qwen3_5_text";
    qwen3_5_synthetic_config(o, c);
  }

 private:
  const char* name_;
};

}  // namespace

const ArchDef& qwen3_5_arch() {
  static const Qwen3_5 d("Qwen3_5ForCausalLM");
  return d;
}
const ArchDef& qwen3_5_vl_arch() {
  static const Qwen3_5 d("Qwen3_5ForConditionalGeneration");
  return d;
}

}  // namespace fp4lm::model
