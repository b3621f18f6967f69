#include "model/arch/qwen3_vl_text.h"

#include "core/error.h"
#include "core/log.h"

namespace fp4lm::model {

void fill_qwen3_vl_text_defaults(nlohmann::json& j, bool dense) {
  if (dense && (!j.contains("head_dim") || j["head_dim"].is_null())) j["head_dim"] = 128;
  const bool theta = (j.contains("rope_theta") && !j["rope_theta"].is_null()) ||
                     (j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
                      j["rope_parameters"].contains("rope_theta"));
  if (!theta) j["rope_theta"] = 500000.0;
}

void read_qwen3_vl_text_keys(const ConfigReader& r, ModelConfig& c) {
  c.qk_norm = true;
  // The shared parser read rope_type / rope_theta from the same object; the M-RoPE keys are ours.
  const char* key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  c.mrope_section = {24, 20, 20};
  if (r.has(key)) {
    if (!r.j[key].is_object()) fail("{}: field '{}' must be an object", r.path, key);
    const ConfigReader rp{r.j[key], r.path};
    if (rp.has("mrope_section")) {
      const nlohmann::json& ms = rp.j["mrope_section"];
      c.mrope_section.clear();
      if (ms.is_array())
        for (const auto& v : ms)
          if (v.is_number_integer() && v.get<int64_t>() >= 0) c.mrope_section.push_back(v.get<int64_t>());
      if (!ms.is_array() || c.mrope_section.size() != 3 || ms.size() != 3)
        fail("{}: {}.mrope_section must be 3 non-negative counts (t, h, w), found {}", r.path, key, ms.dump());
    }
    if (rp.has("mrope_interleaved") && !rp.get<bool>("mrope_interleaved"))
      log().warn("{}: {}.mrope_interleaved is false, but Qwen3-VL's rotary embedding interleaves its M-RoPE "
                 "sections whatever it says (transformers' Qwen3VLTextRotaryEmbedding); fp4lm does the same",
                 r.path, key);
  }
  // Interleaved: pair i takes h when i % 3 == 1 and i < 3 * section[1], w when i % 3 == 2 and
  // i < 3 * section[2]; sections past the head's pairs only mean every such pair.
  c.mrope_interleaved = true;
}

}  // namespace fp4lm::model
