// Qwen3VLForConditionalGeneration (Qwen3-VL 2B / 4B / 8B / 32B): the text model is Qwen3's
// (q_norm / k_norm, a dense SwiGLU MLP, arch/qwen3.cpp's layout), its keys under text_config and
// its tensors under model.language_model. (parse_model_config), with M-RoPE over the whole head
// (arch/qwen3_vl_text.h).
#include "model/arch/llama_layout.h"
#include "model/arch/qwen3_vl_text.h"
#include "model/vision/qwen3_5_vision_tower.h"

namespace fp4lm::model {

namespace {

class Qwen3Vl final : public LlamaLayoutArch {
 public:
  std::string_view hf_name() const override { return "Qwen3VLForConditionalGeneration"; }
  void fill_config_defaults(nlohmann::json& j) const override { fill_qwen3_vl_text_defaults(j, /*dense=*/true); }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_dense_mlp_keys(r, c);
    read_qwen3_vl_text_keys(r, c);
  }
  // model.visual.* (vision_config): Qwen3.5's tower plus DeepStack; nullptr for a checkpoint without one.
  std::unique_ptr<ImageEncoder> load_image_encoder(ModelLoader& l) const override {
    return Qwen3_5VisionTower::load(l, /*deepstack=*/true);
  }
  void synthetic_config(const SampleShape&, nlohmann::json& c) const override {
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"mrope_section", {2, 1, 1}},
                            {"mrope_interleaved", true}};
  }
};

}  // namespace

const ArchDef& qwen3_vl_arch() {
  static const Qwen3Vl d;
  return d;
}

}  // namespace fp4lm::model
