#include "model/vision/siglip_vision_tower.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/layers/activation.h"
#include "model/config_reader.h"
#include "model/layer_plan.h"
#include "model/load/model_loader.h"
#include "model/vision/qwen3_5_vision_tower.h"
#include "model/vision/vision_ops.h"

namespace fp4lm::model {

namespace {

// Keys of vision_config that change nothing at inference: PreTrainedConfig's bookkeeping and the
// initializer; attention_dropout (dropout is off at inference).
bool ignored_key(const std::string& k) {
  static const char* names[] = {"model_type", "initializer_range", "initializer_factor", "dtype", "torch_dtype",
                                "_name_or_path", "transformers_version", "architectures", "output_attentions",
                                "output_hidden_states", "return_dict", "chunk_size_feed_forward", "id2label",
                                "label2id", "problem_type", "tie_word_embeddings", "attention_dropout"};
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return k == n; });
}

float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
float quick_gelu(float x) { return x / (1.0f + std::exp(-1.702f * x)); }

}  // namespace

SiglipVisionConfig parse_siglip_vision_config(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: must be an object, found {}", where, j.dump());
  const ConfigReader r{j, where};
  SiglipVisionConfig c;
  static const char* ints[] = {"hidden_size",  "intermediate_size", "num_hidden_layers", "num_attention_heads",
                               "num_channels", "image_size",        "patch_size"};
  int64_t* fields[] = {&c.hidden_size,  &c.intermediate_size, &c.num_hidden_layers, &c.num_attention_heads,
                       &c.num_channels, &c.image_size,        &c.patch_size};
  for (size_t i = 0; i < std::size(ints); ++i) {
    if (r.has(ints[i]) && !j[ints[i]].is_number_integer())
      fail("{}: field '{}' must be an integer, found {}", where, ints[i], j[ints[i]].dump());
    *fields[i] = r.opt<int64_t>(ints[i], *fields[i]);
    r.positive(ints[i], *fields[i]);
  }
  c.hidden_act = r.opt<std::string>("hidden_act", c.hidden_act);
  if (c.hidden_act != "gelu_pytorch_tanh" && c.hidden_act != "gelu_new" && c.hidden_act != "gelu" &&
      c.hidden_act != "quick_gelu")
    fail("{}: field 'hidden_act' is '{}'; fp4lm's SigLIP tower implements gelu_pytorch_tanh, gelu_new, gelu and "
         "quick_gelu",
         where, c.hidden_act);
  c.layer_norm_eps = r.opt<double>("layer_norm_eps", c.layer_norm_eps);
  if (!(c.layer_norm_eps > 0)) fail("{}: field 'layer_norm_eps' must be > 0, found {}", where, c.layer_norm_eps);
  c.vision_use_head = r.opt<bool>("vision_use_head", c.vision_use_head);
  if (c.hidden_size % c.num_attention_heads != 0)
    fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", where, c.hidden_size,
         c.num_attention_heads);
  if (c.image_size % c.patch_size != 0)
    fail("{}: image_size {} is not a multiple of patch_size {}", where, c.image_size, c.patch_size);
  static const char* known[] = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                "num_channels", "image_size", "patch_size", "hidden_act", "layer_norm_eps",
                                "vision_use_head"};
  for (const auto& [k, v] : j.items())
    if (!ignored_key(k) && std::none_of(std::begin(known), std::end(known), [&](const char* n) { return k == n; }))
      fail("{}: unknown field '{}' (= {}); fp4lm does not know what it changes in the SigLIP vision tower", where, k,
           v.dump());
  return c;
}

SiglipVisionTower::SiglipVisionTower(SiglipVisionConfig config, Weights weights, std::string where)
    : config_(std::move(config)), w_(std::move(weights)), where_(std::move(where)) {}

SiglipVisionTower SiglipVisionTower::load(ModelLoader& l, const std::string& p, SiglipVisionConfig c,
                                          const std::string& where) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  Weights w;
  {
    const std::string name = p + "embeddings.patch_embedding.weight";
    const TensorView& t = l.tensor(name, {H, c.num_channels, c.patch_size, c.patch_size});
    // Copied: the Conv2d's kernel is the matmul's [hidden, channels * patch^2] as stored.
    auto bytes = std::make_shared<std::vector<uint8_t>>(t.data, t.data + t.nbytes);
    w.patch_embed = dense_linear(p + "embeddings.patch_embedding", bytes->data(), t.dtype, H, c.patch_width(),
                                 l.tensor_f32(p + "embeddings.patch_embedding.bias", {H}), l.dtype(), bytes);
  }
  w.pos_embed = l.tensor_f32(p + "embeddings.position_embedding.weight", {c.patches(), H});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string b = fmt::format("{}encoder.layers.{}.", p, i);
    Layer ly;
    ly.ln1_w = l.tensor_f32(b + "layer_norm1.weight", {H});
    ly.ln1_b = l.tensor_f32(b + "layer_norm1.bias", {H});
    ly.ln2_w = l.tensor_f32(b + "layer_norm2.weight", {H});
    ly.ln2_b = l.tensor_f32(b + "layer_norm2.bias", {H});
    const std::string a = b + "self_attn.";
    ly.qkv = l.load_extra_linear(
        plan_linear(a + "qkv_proj", -1, {a + "q_proj", a + "k_proj", a + "v_proj"}, {H, H, H}, H, true));
    ly.out = l.load_extra_linear(plan_linear(a + "out_proj", -1, {a + "out_proj"}, {H}, H, true));
    ly.fc1 = l.load_extra_linear(plan_linear(b + "mlp.fc1", -1, {b + "mlp.fc1"}, {I}, H, true));
    ly.fc2 = l.load_extra_linear(plan_linear(b + "mlp.fc2", -1, {b + "mlp.fc2"}, {H}, I, true));
    w.layers.push_back(std::move(ly));
  }
  w.post_w = l.tensor_f32(p + "post_layernorm.weight", {H});
  w.post_b = l.tensor_f32(p + "post_layernorm.bias", {H});
  return SiglipVisionTower(std::move(c), std::move(w), where);
}

std::vector<float> SiglipVisionTower::forward(const float* pixels, int64_t images) const {
  const SiglipVisionConfig& c = config_;
  ThreadPool& pool = ThreadPool::global();
  const int64_t H = c.hidden_size, I = c.intermediate_size, P = c.patch_size, G = c.grid(), S = c.image_size;
  const int64_t per = c.patches(), N = images * per, K = c.patch_width();
  const float eps = static_cast<float>(c.layer_norm_eps);

  // Each patch's values in the Conv2d kernel's order (channel, row, column), patches row-major.
  std::vector<float> patches(static_cast<size_t>(N * K));
  pool.parallel_for(N, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t img = r / per, gy = (r % per) / G, gx = r % G;
      float* dst = patches.data() + r * K;
      for (int64_t ch = 0; ch < c.num_channels; ++ch)
        for (int64_t y = 0; y < P; ++y) {
          const float* src = pixels + ((img * c.num_channels + ch) * S + gy * P + y) * S + gx * P;
          std::copy_n(src, P, dst + (ch * P + y) * P);
        }
    }
  });
  std::vector<float> x(static_cast<size_t>(N * H));
  w_.patch_embed->forward(patches.data(), N, x.data(), pool);
  patches = {};
  for (int64_t r = 0; r < N; ++r)
    for (int64_t i = 0; i < H; ++i) x[static_cast<size_t>(r * H + i)] += w_.pos_embed[static_cast<size_t>((r % per) * H + i)];

  std::vector<int64_t> segments;  // each image attends to its own patches
  for (int64_t k = 0; k <= images; ++k) segments.push_back(k * per);
  std::vector<float> y(static_cast<size_t>(N * H)), qkv(static_cast<size_t>(N * 3 * H)), att(static_cast<size_t>(N * H));
  std::vector<float> q(static_cast<size_t>(N * H)), k(q.size()), v(q.size()), hid(static_cast<size_t>(N * I));
  for (const Layer& ly : w_.layers) {
    vision_layer_norm(x.data(), N, H, ly.ln1_w, ly.ln1_b, eps, y.data(), pool);
    ly.qkv->forward(y.data(), N, qkv.data(), pool);
    for (int64_t r = 0; r < N; ++r) {
      const float* row = qkv.data() + r * 3 * H;
      std::copy_n(row, H, q.data() + r * H);
      std::copy_n(row + H, H, k.data() + r * H);
      std::copy_n(row + 2 * H, H, v.data() + r * H);
    }
    segment_attention(q.data(), k.data(), v.data(), H, c.num_attention_heads, c.head_dim(), segments, att.data(), pool);
    ly.out->forward(att.data(), N, y.data(), pool);
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    vision_layer_norm(x.data(), N, H, ly.ln2_w, ly.ln2_b, eps, y.data(), pool);
    ly.fc1->forward(y.data(), N, hid.data(), pool);
    pool.parallel_for(N * I, [&](int64_t i0, int64_t i1, int) {
      float* h = hid.data();
      if (c.hidden_act == "gelu")
        for (int64_t i = i0; i < i1; ++i) h[i] = gelu_erf(h[i]);
      else if (c.hidden_act == "quick_gelu")
        for (int64_t i = i0; i < i1; ++i) h[i] = quick_gelu(h[i]);
      else
        for (int64_t i = i0; i < i1; ++i) h[i] = gelu_tanh(h[i]);
    });
    ly.fc2->forward(hid.data(), N, y.data(), pool);
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  vision_layer_norm(x.data(), N, H, w_.post_w, w_.post_b, eps, y.data(), pool);
  return y;
}

}  // namespace fp4lm::model
