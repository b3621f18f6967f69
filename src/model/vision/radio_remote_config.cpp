#include "model/vision/radio_remote_config.h"

#include <cmath>
#include <set>

#include "core/error.h"

namespace fp4lm::model {

RadioVisionConfig radio_config_from_remote(const nlohmann::json& c, const std::string& file) {
  const nlohmann::json& vc = c.at("vision_config");
  const nlohmann::json& args = vc.at("args");
  const std::string where = file + ": vision_config.args";
  RadioVisionConfig r;
  if (!args.contains("model") || !args["model"].is_string()) fail("{}: no string 'model' (the timm ViT name)", where);
  const std::string name = args["model"].get<std::string>();
  struct Dims {
    const char* name;
    int64_t hidden, depth, heads;
  };
  static const Dims kDims[] = {{"vit_small_patch16_224", 384, 12, 6},
                               {"vit_base_patch16_224", 768, 12, 12},
                               {"vit_large_patch16_224", 1024, 24, 16},
                               {"vit_huge_patch16_224", 1280, 32, 16}};
  const Dims* d = nullptr;
  for (const Dims& k : kDims)
    if (name == k.name) d = &k;
  if (!d)
    fail("{}: model '{}' is not a ViT fp4lm knows the shape of (vit_small / base / large / huge _patch16_224, vLLM's "
         "table)",
         where, name);
  r.hidden_size = d->hidden;
  r.num_hidden_layers = d->depth;
  r.num_attention_heads = d->heads;
  r.mlp_ratio = 4.0;
  r.qkv_bias = true;
  r.layerscale_value = 1.0;
  const auto int_of = [&](const nlohmann::json& j, const char* key, const std::string& at) {
    if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0)
      fail("{}: field '{}' must be a positive integer, found {}", at, key, j[key].dump());
    return j[key].get<int64_t>();
  };
  if (vc.contains("patch_size") && !vc["patch_size"].is_null()) r.patch_size = int_of(vc, "patch_size", file + ": vision_config");
  if (c.contains("patch_size") && !c["patch_size"].is_null() && int_of(c, "patch_size", file) != r.patch_size)
    fail("{}: patch_size {} disagrees with vision_config.patch_size {}", file, c["patch_size"].dump(), r.patch_size);
  const int64_t cpe = args.contains("cpe_max_size") && !args["cpe_max_size"].is_null() ? int_of(args, "cpe_max_size", where)
                                                                                      : 2048;
  r.max_img_size = static_cast<int64_t>(std::lround(static_cast<double>(cpe) / static_cast<double>(r.patch_size))) *
                   r.patch_size;
  int64_t cls = 1;
  if (args.contains("cls_token_per_teacher") && args["cls_token_per_teacher"].is_boolean() &&
      args["cls_token_per_teacher"].get<bool>()) {
    std::set<std::string> names;
    if (args.contains("teachers") && args["teachers"].is_array())
      for (const auto& t : args["teachers"])
        if (t.is_object() && t.contains("name") && t["name"].is_string()) names.insert(t["name"].get<std::string>());
    if (names.empty()) fail("{}: cls_token_per_teacher is true but 'teachers' names none", where);
    cls = static_cast<int64_t>(names.size());
  }
  r.num_cls_tokens = cls;
  r.num_registers = 0;
  if (args.contains("register_multiple") && !args["register_multiple"].is_null()) {
    const int64_t m = int_of(args, "register_multiple", where);
    r.num_registers = m - cls % m;
  }
  if (args.contains("qk_normalization") && args["qk_normalization"] == true)
    fail("{}: field 'qk_normalization' is true; fp4lm's RADIO tower has no q / k normalization", where);
  if (args.contains("norm_type") && !args["norm_type"].is_null() && args["norm_type"] != "layer_norm")
    fail("{}: field 'norm_type' is {}; fp4lm's RADIO tower runs layer_norm", where, args["norm_type"].dump());
  if (args.contains("layer_norm_eps") && args["layer_norm_eps"].is_number())
    r.layer_norm_eps = args["layer_norm_eps"].get<double>();
  if (args.contains("hidden_act") && args["hidden_act"].is_string()) {
    r.hidden_act = args["hidden_act"].get<std::string>();
    if (r.hidden_act != "gelu" && r.hidden_act != "gelu_pytorch_tanh")
      fail("{}: field 'hidden_act' is '{}'; fp4lm runs gelu or gelu_pytorch_tanh", where, r.hidden_act);
  }
  return r;
}

}  // namespace fp4lm::model
