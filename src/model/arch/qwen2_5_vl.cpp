// Qwen2_5_VLForConditionalGeneration (Qwen2.5-VL 3B / 7B / 32B / 72B; Cosmos-Reason1) and
// Qwen2VLForConditionalGeneration (Qwen2-VL 2B / 7B / 72B): the text model is Qwen2's (Llama's
// layout with q/k/v biases) with multimodal RoPE in its contiguous form — frequency pairs
// [0, t) rotate by the token's temporal position, [t, t + h) by its row, the rest by its column
// (mrope_section [t, h, w], summing to head_dim / 2; default [16, 24, 24] as transformers'
// rotary embedding), not Qwen3-VL's interleaved form. The published configs keep the text keys
// at the top level beside vision_config (transformers' config class lifts them into text_config;
// text_config, when present, wins), with rope_scaling type "mrope" meaning the default rope; the
// published checkpoints store model.layers.*, lm_head.weight and visual.* (transformers 5 saves
// that layout too; model.language_model.* is read as well, model_loader.cpp).
// Both towers run (model/vision/qwen2_5_vision_tower.h: Qwen2.5-VL's windowed one, Qwen2-VL's form
// with LayerNorm, a QuickGELU MLP and no windows).
#include <numeric>

#include "core/error.h"
#include "model/arch/llama_layout.h"
#include "model/load/model_loader.h"
#include "model/vision/qwen2_5_vision_tower.h"

namespace fp4lm::model {

namespace {

class Qwen2Vl final : public LlamaLayoutArch {
 public:
  Qwen2Vl(const char* name, bool v2_5) : name_(name), v2_5_(v2_5) {}
  std::string_view hf_name() const override { return name_; }
  bool flat_text_config() const override { return true; }
  void fill_config_defaults(nlohmann::json& j) const override {
    // Qwen2VLTextConfig / Qwen2_5_VLTextConfig's default_theta, and their "mrope" rope type read
    // as "default" (convert_rope_params_to_dict).
    const char* key = j.contains("rope_parameters") && j["rope_parameters"].is_object() ? "rope_parameters"
                                                                                        : "rope_scaling";
    const bool theta = (j.contains("rope_theta") && !j["rope_theta"].is_null()) ||
                       (j.contains(key) && j[key].is_object() && j[key].contains("rope_theta"));
    if (!theta) j["rope_theta"] = 1000000.0;
    if (j.contains(key) && j[key].is_object())
      for (const char* t : {"rope_type", "type"})
        if (j[key].contains(t) && j[key][t] == "mrope") j[key][t] = "default";
  }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_dense_mlp_keys(r, c);
    c.attention_bias = true;
    const char* key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
    c.mrope_section = {16, 24, 24};
    if (r.has(key) && r.j[key].is_object() && r.j[key].contains("mrope_section")) {
      const nlohmann::json& ms = r.j[key]["mrope_section"];
      c.mrope_section.clear();
      if (ms.is_array())
        for (const auto& v : ms)
          if (v.is_number_integer() && v.get<int64_t>() >= 0) c.mrope_section.push_back(v.get<int64_t>());
      if (!ms.is_array() || c.mrope_section.size() != 3 || ms.size() != 3)
        fail("{}: {}.mrope_section must be 3 non-negative counts (t, h, w), found {}", r.path, key, ms.dump());
    }
    // transformers splits the head's frequency pairs by these counts: they must cover them exactly.
    const int64_t sum = std::accumulate(c.mrope_section.begin(), c.mrope_section.end(), int64_t{0});
    if (sum != c.head_dim / 2)
      fail("{}: {}.mrope_section {} sums to {}, but the head has head_dim / 2 = {} frequency pairs", r.path, key,
           nlohmann::json(c.mrope_section).dump(), sum, c.head_dim / 2);
    c.mrope_interleaved = false;
  }
  // visual.* / model.visual.* (vision_config); nullptr for a checkpoint without one.
  std::unique_ptr<ImageEncoder> load_image_encoder(ModelLoader& l) const override {
    return Qwen2_5VisionTower::load(l, /*qwen2=*/!v2_5_);
  }
  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    const int64_t half = o.head_dim / 2;
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0},
                            {"mrope_section", {half - 2 * (half / 4), half / 4, half / 4}}};
  }

 private:
  const char* name_;
  bool v2_5_;
};

}  // namespace

const ArchDef& qwen2_5_vl_arch() {
  static const Qwen2Vl d("Qwen2_5_VLForConditionalGeneration", /*v2_5=*/true);
  return d;
}

const ArchDef& qwen2_vl_arch() {
  static const Qwen2Vl d("Qwen2VLForConditionalGeneration", /*v2_5=*/false);
  return d;
}

}  // namespace fp4lm::model
