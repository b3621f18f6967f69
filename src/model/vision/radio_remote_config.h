#pragma once
// The RADIO tower's shape from a remote-code Nemotron VL / Omni config.json (vision_config with an
// "args" object: RADIO's own training arguments), as vLLM's RadioConfig / RadioModel build it:
//   args.model             a timm ViT name -> hidden, depth, heads (mlp_ratio 4): vit_small / base /
//                          large / huge _patch16_224 (others refused by name);
//   patch_size             vision_config.patch_size (config.json's, if both, must agree);
//   args.cpe_max_size      the position table's side in pixels (rounded to the patch; 2048 default);
//   args.teachers, args.cls_token_per_teacher   cls tokens: one per distinct teacher name, else 1;
//   args.register_multiple registers: register_multiple - cls % register_multiple (0 without);
//   args.qk_normalization, args.norm_type      refused unless false / "layer_norm";
//   qkv bias, LayerNorm eps 1e-6 (args.layer_norm_eps if set), GELU (args.hidden_act if set).
// The other args keys (optimizer, data and distillation settings) do not shape the tower and are not read.
#include <string>

#include <nlohmann/json.hpp>

#include "model/vision/radio_vision_tower.h"

namespace fp4lm::model {

RadioVisionConfig radio_config_from_remote(const nlohmann::json& config, const std::string& file);

}  // namespace fp4lm::model
