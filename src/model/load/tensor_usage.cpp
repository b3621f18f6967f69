#include "model/load/tensor_usage.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"

namespace fp4lm::model {

namespace {

bool ends_with(const std::string& s, std::string_view t) { return s.size() >= t.size() && s.ends_with(t); }
bool starts_with(const std::string& s, std::string_view t) { return s.rfind(t, 0) == 0; }

std::string last_component(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

// The decoder layer number of `name` (the component after the first "layers."), or -1.
int64_t layer_number(const std::string& name) {
  size_t at = starts_with(name, "layers.") ? 0 : name.find(".layers.");
  if (at == std::string::npos) return -1;
  size_t i = name.find("layers.", at) + 7;
  int64_t v = 0;
  const size_t first = i;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) v = v * 10 + (name[i] - '0');
  return i > first && i < name.size() && name[i] == '.' ? v : -1;
}

const char* kInvFreq = "rotary_emb.inv_freq: recomputed from config.json";
const char* kMtp = "MTP layers: read only for speculative method 'mtp'";
const char* kOther = "the multi-modal checkpoint's other components (vision / audio towers, projectors): not run";
const char* kTied = "lm_head.weight with tie_word_embeddings: the embedding table is the head";
// `fp8_kv` (tensor_usage.h) also stands for a declared quantized KV cache (model/state/kv_quant.h),
// whose layers consume their k/v scales and biases the same way.
const char* kKvScales =
    "attention calibration scales (k/v/q/prob scales, k/v biases): used only by an FP8 KV cache (k/v scales) or the "
    "quantized KV cache the checkpoint declares (k/v scales and biases)";

bool kv_calibration(const std::string& last) {
  static const std::set<std::string> names = {"k_scale", "v_scale", "q_scale", "prob_scale", "k_bias", "v_bias"};
  return names.count(last) > 0;
}

// Why `name` may stay unread, or nullptr.
const char* ignore_reason(const std::string& name, const ModelConfig& c, bool fp8_kv, bool mtp_loaded) {
  const std::string last = last_component(name);
  if (ends_with(name, "rotary_emb.inv_freq")) return kInvFreq;
  const bool declares_mtp = c.num_nextn_predict_layers > 0 || c.mamba.mtp_layers > 0;
  if (!mtp_loaded && (starts_with(name, "mtp.") || name.find(".mtp.") != std::string::npos)) return kMtp;
  if (declares_mtp && layer_number(name) >= c.num_layers) return kMtp;
  if (c.tie_word_embeddings && (name == "lm_head.weight" || name == c.wrapper_prefix + "lm_head.weight")) return kTied;
  if (!fp8_kv && kv_calibration(last)) return kKvScales;
  // A VL checkpoint in the layout of Qwen2-VL / Qwen2.5-VL's releases: its tower beside model.*.
  if (starts_with(name, "visual.") && c.architecture.ends_with("ForConditionalGeneration")) return kOther;
  if (!c.wrapper_prefix.empty() || c.tensor_prefix != "model.") {
    // A multi-modal wrapper: what lies outside the language model's prefixes is another component.
    std::vector<std::string> text = {c.wrapper_prefix + c.tensor_prefix, c.wrapper_prefix + "lm_head.", "lm_head.",
                                     "language_model.", c.wrapper_prefix + "model.norm", "model.language_model."};
    for (const auto& [engine, disk] : c.tensor_renames) text.push_back(c.wrapper_prefix + disk);
    if (std::none_of(text.begin(), text.end(), [&](const std::string& p) { return starts_with(name, p); }))
      return kOther;
  }
  return nullptr;
}

std::string listed(const std::vector<std::string>& names, size_t most = 40) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < most; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > most) out += fmt::format(", ... ({} more)", names.size() - most);
  return out;
}

}  // namespace

bool is_quantization_tensor(const std::string& name) {
  static const std::set<std::string> names = {
      "weight_scale",    "weight_scale_2",  "weight_scale_inv",  "input_scale",      "input_scale_inv",
      "output_scale",    "pre_quant_scale", "k_scale",           "v_scale",          "q_scale",
      "prob_scale",      "k_bias",          "v_bias",            "weight_global_scale", "input_global_scale",
      "weight_packed",   "weight_shape",    "weight_zero_point", "input_zero_point", "weight_g_idx",
      "qweight",         "qzeros",          "scales",            "g_idx",            "svdquant_lora_a",
      "svdquant_lora_b", "smooth_factor",   "awq_scale"};
  const std::string last = last_component(name);
  return names.count(last) || name.find("quantizer") != std::string::npos || starts_with(last, "_") ||
         ends_with(last, "_amax") || ends_with(last, "_blocks") || ends_with(last, "_scales");
}

TensorUsage tensor_usage(const io::Checkpoint& ckpt, const ModelConfig& c, bool fp8_kv, bool mtp_loaded) {
  TensorUsage u;
  for (const std::string& name : ckpt.unused_tensor_names()) {
    if (const char* why = ignore_reason(name, c, fp8_kv, mtp_loaded)) u.ignored[why].push_back(name);
    else if (is_quantization_tensor(name)) u.unused_quantization.push_back(name);
    else u.unused_model.push_back(name);
  }
  return u;
}

void enforce_tensor_usage(const io::Checkpoint& ckpt, const TensorUsage& u) {
  if (!u.unused_quantization.empty())
    fail("{}: {} quantization tensor(s) that no layer of the model consumes: {}. fp4lm does not know what they do "
         "here, and running without them would compute something else than the checkpoint describes (docs/FORMAT.md, "
         "'Nothing in a checkpoint is ignored')",
         ckpt.dir(), u.unused_quantization.size(), listed(u.unused_quantization));
  if (!u.unused_model.empty())
    log().warn("{}: {} tensor(s) of the checkpoint were not used by the model: [{}]", ckpt.dir(),
               u.unused_model.size(), listed(u.unused_model));
}

}  // namespace fp4lm::model
