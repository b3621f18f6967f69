#include "model/vision/radio_vision_tower.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/layers/activation.h"
#include "model/config_reader.h"
#include "model/layer_plan.h"
#include "model/load/model_loader.h"
#include "model/vision/vision_ops.h"

namespace fp4lm::model {

namespace {

// Keys of vision_config that change nothing here: PreTrainedConfig's bookkeeping, the
// initializers, dropouts and drop-path (off at inference), image_size (no RadioModel forward reads
// it), the derived patch_dim / video_patch_dim (checked), the summary (cls) outputs, which Nemotron
// does not read, norm_mean / norm_std (the input conditioner is the processor's normalization, its
// own preprocessor_config.json values), video_temporal_patch_size (the video embedder; video input
// is refused).
bool ignored_key(const std::string& k) {
  static const char* names[] = {"model_type", "initializer_range", "initializer_factor", "dtype", "torch_dtype",
                                "_name_or_path", "transformers_version", "architectures", "output_attentions",
                                "output_hidden_states", "return_dict", "chunk_size_feed_forward", "id2label",
                                "label2id", "problem_type", "tie_word_embeddings", "attention_probs_dropout_prob",
                                "hidden_dropout_prob", "drop_path_rate", "image_size", "summary_idxs", "norm_mean",
                                "norm_std", "video_temporal_patch_size", "video_patch_dim", "patch_dim"};
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return k == n; });
}

float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }

// F.interpolate(mode="bilinear", align_corners=False) of one [in, in, dim] grid to [out, out, dim],
// the source index and weights in float32 as ATen's area_pixel_compute_source_index.
std::vector<float> resize_bilinear(const std::vector<float>& g, int64_t in, int64_t out, int64_t dim) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  std::vector<int64_t> i0(static_cast<size_t>(out)), i1(static_cast<size_t>(out));
  std::vector<float> l0(static_cast<size_t>(out)), l1(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const float real = std::max(scale * (static_cast<float>(o) + 0.5f) - 0.5f, 0.0f);
    const int64_t a = std::min(static_cast<int64_t>(real), in - 1);
    i0[static_cast<size_t>(o)] = a;
    i1[static_cast<size_t>(o)] = a + (a < in - 1 ? 1 : 0);
    l1[static_cast<size_t>(o)] = std::min(std::max(real - static_cast<float>(a), 0.0f), 1.0f);
    l0[static_cast<size_t>(o)] = 1.0f - l1[static_cast<size_t>(o)];
  }
  std::vector<float> r(static_cast<size_t>(out * out * dim));
  for (int64_t y = 0; y < out; ++y)
    for (int64_t x = 0; x < out; ++x)
      for (int64_t d = 0; d < dim; ++d) {
        auto at = [&](int64_t yy, int64_t xx) { return g[static_cast<size_t>((yy * in + xx) * dim + d)]; };
        const size_t Y = static_cast<size_t>(y), X = static_cast<size_t>(x);
        const float top = at(i0[Y], i0[X]) * l0[X] + at(i0[Y], i1[X]) * l1[X];
        const float bottom = at(i1[Y], i0[X]) * l0[X] + at(i1[Y], i1[X]) * l1[X];
        r[static_cast<size_t>((y * out + x) * dim + d)] = top * l0[Y] + bottom * l1[Y];
      }
  return r;
}

}  // namespace

RadioVisionConfig parse_radio_vision_config(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: must be an object, found {}", where, j.dump());
  const ConfigReader r{j, where};
  RadioVisionConfig c;
  if (r.has("model_type") && j["model_type"] != "radio")
    fail("{}: model_type {} is not transformers' RADIO vision config (expected \"radio\")", where,
         j["model_type"].dump());
  static const char* ints[] = {"hidden_size",  "num_hidden_layers", "num_attention_heads", "num_channels",
                               "patch_size",   "max_img_size",      "num_cls_tokens",      "num_registers"};
  int64_t* fields[] = {&c.hidden_size, &c.num_hidden_layers, &c.num_attention_heads, &c.num_channels,
                       &c.patch_size,  &c.max_img_size,      &c.num_cls_tokens,      &c.num_registers};
  for (size_t i = 0; i < std::size(ints); ++i) {
    if (r.has(ints[i]) && !j[ints[i]].is_number_integer())
      fail("{}: field '{}' must be an integer, found {}", where, ints[i], j[ints[i]].dump());
    *fields[i] = r.opt<int64_t>(ints[i], *fields[i]);
    if (std::string(ints[i]) != "num_registers" && std::string(ints[i]) != "num_cls_tokens") r.positive(ints[i], *fields[i]);
    else if (*fields[i] < 0) fail("{}: field '{}' must be >= 0, found {}", where, ints[i], *fields[i]);
  }
  c.mlp_ratio = r.opt<double>("mlp_ratio", c.mlp_ratio);
  c.hidden_act = r.opt<std::string>("hidden_act", c.hidden_act);
  if (c.hidden_act != "gelu" && c.hidden_act != "gelu_pytorch_tanh")
    fail("{}: field 'hidden_act' is '{}'; fp4lm's RADIO tower implements gelu and gelu_pytorch_tanh", where,
         c.hidden_act);
  c.layer_norm_eps = r.opt<double>("layer_norm_eps", c.layer_norm_eps);
  if (!(c.layer_norm_eps > 0)) fail("{}: field 'layer_norm_eps' must be > 0, found {}", where, c.layer_norm_eps);
  c.qkv_bias = r.opt<bool>("qkv_bias", c.qkv_bias);
  c.layerscale_value = r.opt<double>("layerscale_value", c.layerscale_value);
  if (r.opt<bool>("use_swiglu_ffn", false))
    fail("{}: field 'use_swiglu_ffn' is true; fp4lm's RADIO tower implements the plain fc1 / fc2 MLP only", where);
  if (c.num_channels != 3) fail("{}: field 'num_channels' is {}; images have 3 channels", where, c.num_channels);
  if (c.hidden_size % c.num_attention_heads != 0)
    fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", where, c.hidden_size,
         c.num_attention_heads);
  if (c.intermediate() <= 0) fail("{}: field 'mlp_ratio' must be > 0, found {}", where, c.mlp_ratio);
  if (c.max_grid() <= 0) fail("{}: max_img_size {} is below patch_size {}", where, c.max_img_size, c.patch_size);
  if (r.has("patch_dim") && j["patch_dim"] != c.patch_dim())
    fail("{}: patch_dim {} is not num_channels * patch_size^2 = {}", where, j["patch_dim"].dump(), c.patch_dim());
  static const char* known[] = {"hidden_size",  "num_hidden_layers", "num_attention_heads", "num_channels",
                                "patch_size",   "max_img_size",      "num_cls_tokens",      "num_registers",
                                "mlp_ratio",    "hidden_act",        "layer_norm_eps",      "qkv_bias",
                                "layerscale_value", "use_swiglu_ffn"};
  for (const auto& [k, v] : j.items())
    if (!ignored_key(k) && std::none_of(std::begin(known), std::end(known), [&](const char* n) { return k == n; }))
      fail("{}: unknown field '{}' (= {}); fp4lm does not know what it changes in the RADIO vision tower", where, k,
           v.dump());
  return c;
}

RadioVisionTower::RadioVisionTower(RadioVisionConfig config, Weights weights)
    : config_(std::move(config)), w_(std::move(weights)) {}

RadioVisionTower RadioVisionTower::load(ModelLoader& l, const std::string& p, RadioVisionConfig c) {
  const int64_t H = c.hidden_size, I = c.intermediate(), G = c.max_grid();
  Weights w;
  const std::string pg = p + "patch_generator.";
  w.embedder = l.load_extra_linear(plan_linear(pg + "embedder", -1, {pg + "embedder"}, {H}, c.patch_dim(), false));
  w.pos_embed = l.tensor_f32(pg + "pos_embed", {1, G * G, H});
  w.prefix = l.tensor_f32(pg + "cls_token.token", {c.prefix_tokens(), H});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string b = fmt::format("{}blocks.{}.", p, i);
    Layer ly;
    ly.ln1_w = l.tensor_f32(b + "norm1.weight", {H});
    ly.ln1_b = l.tensor_f32(b + "norm1.bias", {H});
    ly.ln2_w = l.tensor_f32(b + "norm2.weight", {H});
    ly.ln2_b = l.tensor_f32(b + "norm2.bias", {H});
    // transformers loads a checkpoint without LayerScale tensors with layerscale_value (its
    // _keys_to_ignore_on_load_missing); C-RADIO has none.
    for (auto [name, dst] : {std::pair{"layer_scale1.lambda1", &ly.ls1}, {"layer_scale2.lambda1", &ly.ls2}})
      *dst = l.checkpoint().find(b + name) ? l.tensor_f32(b + name, {H})
                                          : std::vector<float>(static_cast<size_t>(H),
                                                               static_cast<float>(c.layerscale_value));
    ly.qkv = l.load_extra_linear(plan_linear(b + "attn.qkv", -1, {b + "attn.qkv"}, {3 * H}, H, c.qkv_bias));
    ly.proj = l.load_extra_linear(plan_linear(b + "attn.proj", -1, {b + "attn.proj"}, {H}, H, true));
    ly.fc1 = l.load_extra_linear(plan_linear(b + "mlp.fc1", -1, {b + "mlp.fc1"}, {I}, H, true));
    ly.fc2 = l.load_extra_linear(plan_linear(b + "mlp.fc2", -1, {b + "mlp.fc2"}, {H}, I, true));
    w.layers.push_back(std::move(ly));
  }
  return RadioVisionTower(std::move(c), std::move(w));
}

std::vector<float> RadioVisionTower::positions(int64_t gh, int64_t gw) const {
  const int64_t H = config_.hidden_size, G = config_.max_grid(), side = std::max(gh, gw);
  const std::vector<float> grid = resize_bilinear(w_.pos_embed, G, side, H);
  std::vector<float> out(static_cast<size_t>(gh * gw * H));
  for (int64_t y = 0; y < gh; ++y)
    std::copy_n(grid.data() + y * side * H, gw * H, out.data() + y * gw * H);
  return out;
}

std::vector<float> RadioVisionTower::forward(const float* patches, int64_t gh, int64_t gw) const {
  const RadioVisionConfig& c = config_;
  ThreadPool& pool = ThreadPool::global();
  const int64_t H = c.hidden_size, I = c.intermediate(), P0 = c.prefix_tokens(), N = gh * gw, T = P0 + N;
  const float eps = static_cast<float>(c.layer_norm_eps);
  std::vector<float> x(static_cast<size_t>(T * H));
  std::copy(w_.prefix.begin(), w_.prefix.end(), x.begin());
  w_.embedder->forward(patches, N, x.data() + P0 * H, pool);
  const std::vector<float> pos = positions(gh, gw);
  for (size_t i = 0; i < pos.size(); ++i) x[static_cast<size_t>(P0 * H) + i] += pos[i];

  const std::vector<int64_t> segments = {0, T};  // the image attends to its own tokens
  std::vector<float> y(x.size()), qkv(static_cast<size_t>(T * 3 * H)), att(x.size()), hid(static_cast<size_t>(T * I));
  const bool erf = c.hidden_act == "gelu";
  for (const Layer& ly : w_.layers) {
    vision_layer_norm(x.data(), T, H, ly.ln1_w, ly.ln1_b, eps, y.data(), pool);
    ly.qkv->forward(y.data(), T, qkv.data(), pool);
    segment_attention(qkv.data(), qkv.data() + H, qkv.data() + 2 * H, 3 * H, c.num_attention_heads, c.head_dim(),
                      segments, att.data(), pool);
    ly.proj->forward(att.data(), T, y.data(), pool);
    for (int64_t r = 0; r < T; ++r)
      for (int64_t i = 0; i < H; ++i) x[static_cast<size_t>(r * H + i)] += y[static_cast<size_t>(r * H + i)] * ly.ls1[static_cast<size_t>(i)];
    vision_layer_norm(x.data(), T, H, ly.ln2_w, ly.ln2_b, eps, y.data(), pool);
    ly.fc1->forward(y.data(), T, hid.data(), pool);
    pool.parallel_for(T * I, [&](int64_t i0, int64_t i1, int) {
      float* h = hid.data();
      for (int64_t i = i0; i < i1; ++i) h[i] = erf ? gelu_erf(h[i]) : gelu_tanh(h[i]);
    });
    ly.fc2->forward(hid.data(), T, y.data(), pool);
    for (int64_t r = 0; r < T; ++r)
      for (int64_t i = 0; i < H; ++i) x[static_cast<size_t>(r * H + i)] += y[static_cast<size_t>(r * H + i)] * ly.ls2[static_cast<size_t>(i)];
  }
  return std::vector<float>(x.begin() + P0 * H, x.end());
}

}  // namespace fp4lm::model
