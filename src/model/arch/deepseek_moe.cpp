#include "model/arch/deepseek_moe.h"

#include <fmt/format.h>

#include "model/layers/mlp.h"
#include "model/layers/sigmoid_moe.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

void read_deepseek_moe_keys(const ConfigReader& r, ModelConfig& c, const DeepseekMoeDefaults& d) {
  // transformers 5 may save n_routed_experts under its alias num_local_experts.
  const char* experts_key = r.has("n_routed_experts") || !r.has("num_local_experts") ? "n_routed_experts"
                                                                                      : "num_local_experts";
  c.moe.num_experts = r.req<int64_t>(experts_key);
  r.positive(experts_key, c.moe.num_experts);
  c.moe.top_k = r.req<int64_t>("num_experts_per_tok");
  r.positive("num_experts_per_tok", c.moe.top_k);
  c.moe.moe_intermediate_size = r.req<int64_t>("moe_intermediate_size");
  r.positive("moe_intermediate_size", c.moe.moe_intermediate_size);
  const int64_t shared = r.opt<int64_t>("n_shared_experts", 1);
  if (shared < 0) fail("{}: field 'n_shared_experts' must be >= 0, found {}", r.path, shared);
  c.moe.shared_expert_intermediate_size = shared * c.moe.moe_intermediate_size;
  c.moe.norm_topk_prob = r.opt<bool>("norm_topk_prob", true);
  c.moe.sigmoid.enabled = true;
  c.moe.sigmoid.n_group = r.opt<int64_t>("n_group", d.n_group);
  c.moe.sigmoid.topk_group = r.opt<int64_t>("topk_group", d.topk_group);
  c.moe.sigmoid.routed_scaling_factor = r.opt<double>("routed_scaling_factor", d.routed_scaling_factor);
  r.positive("n_group", c.moe.sigmoid.n_group);
  r.positive("topk_group", c.moe.sigmoid.topk_group);
  const int64_t groups = c.moe.sigmoid.n_group, per = c.moe.num_experts / groups;
  if (c.moe.num_experts % groups != 0 || (groups > 1 && per < 2))
    fail("{}: n_group ({}) must split the {} experts into equal groups of at least 2", r.path, groups,
         c.moe.num_experts);
  if (c.moe.sigmoid.topk_group > groups)
    fail("{}: topk_group ({}) exceeds n_group ({})", r.path, c.moe.sigmoid.topk_group, groups);
  if (c.moe.top_k > c.moe.sigmoid.topk_group * per)
    fail("{}: num_experts_per_tok ({}) exceeds the experts of topk_group={} groups ({})", r.path, c.moe.top_k,
         c.moe.sigmoid.topk_group, c.moe.sigmoid.topk_group * per);
  const int64_t dense = r.opt<int64_t>("first_k_dense_replace", d.first_k_dense_replace);
  if (dense < 0) fail("{}: field 'first_k_dense_replace' must be >= 0, found {}", r.path, dense);
  c.moe.mlp_only_layers.clear();
  for (int64_t i = 0; i < std::min(dense, c.num_layers); ++i) c.moe.mlp_only_layers.push_back(i);
  c.moe.decoder_sparse_step = 1;
  c.intermediate_size = r.opt<int64_t>("intermediate_size", 0);
}

void plan_deepseek_moe(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) {
  const std::string p = fmt::format("model.layers.{}.mlp", i);
  if (!c.layer_is_moe(i)) return plan_dense_mlp(c, i, p, c.intermediate_size, out);
  plan_sparse_moe(c, i, p, {"gate_proj", "up_proj", "down_proj"}, out);
  for (LayerSpec& s : out)
    if (s.name == p + ".gate") s.f32_act = true;  // HF: F.linear in float32
  if (c.moe.shared_expert_intermediate_size > 0)
    plan_dense_mlp(c, i, p + ".shared_experts", c.moe.shared_expert_intermediate_size, out);
}

std::vector<LayerParam> deepseek_moe_params(const ModelConfig& c, int64_t i) {
  if (!c.layer_is_moe(i)) return {};
  return {{fmt::format("model.layers.{}.mlp.gate.e_score_correction_bias", i), {c.moe.num_experts}}};
}

std::unique_ptr<FeedForward> make_deepseek_moe(ModelLoader& l, int64_t i) {
  const std::string p = fmt::format("model.layers.{}.mlp", i);
  if (!l.config().layer_is_moe(i)) return std::make_unique<DenseMlp>(l, p);
  return std::make_unique<SigmoidMoe>(l, p, p + ".gate.e_score_correction_bias",
                                      l.config().moe.shared_expert_intermediate_size > 0, DType::F32);
}

void deepseek_moe_synthetic_config(const SampleShape& o, nlohmann::json& c) {
  c["n_routed_experts"] = o.experts;
  c["num_experts_per_tok"] = o.top_k;
  c["moe_intermediate_size"] = o.moe_intermediate;
  c["n_shared_experts"] = 1;
  const int64_t groups = o.experts % 2 == 0 && o.experts / 2 >= 2 && o.top_k <= o.experts / 2 ? 2 : 1;
  c["n_group"] = groups;
  c["topk_group"] = 1;
  c["norm_topk_prob"] = true;
  c["routed_scaling_factor"] = 2.5;
  c["first_k_dense_replace"] = 1;
}

void read_mlp_layer_types(const ConfigReader& r, ModelConfig& c) {
  if (!r.has("mlp_layer_types")) return;
  const nlohmann::json& t = r.j["mlp_layer_types"];
  if (!t.is_array() || static_cast<int64_t>(t.size()) != c.num_layers)
    fail("{}: field 'mlp_layer_types' must list {} entries ('dense' or 'sparse')", r.path, c.num_layers);
  c.moe.mlp_only_layers.clear();
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string s = t[static_cast<size_t>(i)].is_string() ? t[static_cast<size_t>(i)].get<std::string>() : "";
    if (s != "dense" && s != "sparse")
      fail("{}: field 'mlp_layer_types' holds '{}' (expected dense or sparse)", r.path, t[static_cast<size_t>(i)].dump());
    if (s == "dense") c.moe.mlp_only_layers.push_back(i);
  }
}

void log_skipped_mtp(ModelLoader& l, int64_t layer) {
  const ModelConfig& c = l.config();
  if (layer != 0 || c.num_nextn_predict_layers <= 0) return;
  l.log_once(fmt::format("{}: skipping the {} multi-token-prediction layer(s) (model.layers.{}{}; not read)",
                         c.architecture, c.num_nextn_predict_layers, c.num_layers,
                         c.num_nextn_predict_layers > 1 ? fmt::format("-{}", c.num_layers + c.num_nextn_predict_layers - 1)
                                                        : std::string()));
}

}  // namespace fp4lm::model
