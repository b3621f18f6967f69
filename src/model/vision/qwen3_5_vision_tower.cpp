#include "model/vision/qwen3_5_vision_tower.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "kernels/registry.h"
#include "model/layers/activation.h"
#include "model/config_reader.h"
#include "model/layer_plan.h"
#include "model/load/model_loader.h"
#include "model/vision/vision_ops.h"

namespace fp4lm::model {

namespace {

constexpr float kLayerNormEps = 1e-6f;  // transformers' nn.LayerNorm(eps=1e-6), not a config key

// Keys of vision_config read by nothing: PreTrainedConfig's bookkeeping and the initializer.
bool bookkeeping_key(const std::string& k) {
  static const char* names[] = {"model_type", "initializer_range", "dtype", "torch_dtype", "_name_or_path",
                                "transformers_version", "architectures", "output_attentions",
                                "output_hidden_states", "return_dict", "chunk_size_feed_forward", "id2label",
                                "label2id", "problem_type", "tie_word_embeddings"};
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return k == n; });
}

float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }

void activate(float* x, int64_t n, const std::string& act, ThreadPool& pool) {
  pool.parallel_for(n, [&](int64_t i0, int64_t i1, int) {
    if (act == "gelu_pytorch_tanh")
      for (int64_t i = i0; i < i1; ++i) x[i] = gelu_tanh(x[i]);
    else if (act == "gelu")
      for (int64_t i = i0; i < i1; ++i) x[i] = gelu_erf(x[i]);
    else
      for (int64_t i = i0; i < i1; ++i) x[i] = silu(x[i]);
  });
}

// One bilinear (align_corners) axis: the two taps into a `side`-long table for index i of `size`,
// in float32 as transformers computes them.
struct Taps {
  int64_t t0, t1;
  float w0, w1;
};
Taps axis_taps(int64_t i, int64_t size, int64_t side) {
  const float src = static_cast<float>(i) * static_cast<float>(side - 1) / static_cast<float>(std::max<int64_t>(size - 1, 1));
  const float f = std::floor(src);
  const auto clamp = [&](int64_t t) { return std::clamp<int64_t>(t, 0, side - 1); };
  const int64_t fl = static_cast<int64_t>(f);
  return {clamp(fl), clamp(fl + 1), std::max(0.0f, 1.0f - std::fabs(src - f)), std::max(0.0f, 1.0f - std::fabs(src - f - 1.0f))};
}

}  // namespace

Qwen3_5VisionConfig parse_qwen3_5_vision_config(const nlohmann::json& j, const std::string& where, bool deepstack) {
  if (!j.is_object()) fail("{}: must be an object, found {}", where, j.dump());
  const ConfigReader r{j, where};
  Qwen3_5VisionConfig c;
  static const char* ints[] = {"depth",      "hidden_size",          "intermediate_size",  "num_heads",
                               "in_channels", "patch_size",          "temporal_patch_size", "spatial_merge_size",
                               "out_hidden_size", "num_position_embeddings"};
  int64_t* fields[] = {&c.depth,      &c.hidden_size,          &c.intermediate_size,  &c.num_heads,
                       &c.in_channels, &c.patch_size,          &c.temporal_patch_size, &c.spatial_merge_size,
                       &c.out_hidden_size, &c.num_position_embeddings};
  for (size_t i = 0; i < std::size(ints); ++i) {
    *fields[i] = r.opt<int64_t>(ints[i], *fields[i]);
    r.positive(ints[i], *fields[i]);
  }
  // transformers' attribute_map aliases.
  if (r.has("num_attention_heads")) c.num_heads = r.get<int64_t>("num_attention_heads");
  if (r.has("num_hidden_layers")) c.depth = r.get<int64_t>("num_hidden_layers");
  c.hidden_act = r.opt<std::string>("hidden_act", c.hidden_act);
  if (c.hidden_act != "gelu_pytorch_tanh" && c.hidden_act != "gelu" && c.hidden_act != "silu")
    fail("{}: field 'hidden_act' is '{}'; fp4lm's vision tower implements gelu_pytorch_tanh, gelu and silu", where,
         c.hidden_act);
  if (r.has("rope_parameters")) {
    const nlohmann::json& rp = j["rope_parameters"];
    if (!rp.is_object()) fail("{}: field 'rope_parameters' must be an object, found {}", where, rp.dump());
    for (const auto& [k, v] : rp.items()) {
      if (k == "rope_theta") {
        if (!v.is_number()) fail("{}: field 'rope_parameters.rope_theta' must be a number, found {}", where, v.dump());
        c.rope_theta = v.get<double>();
      } else if (k == "rope_type") {
        if (v != "axial" && v != "default")
          fail("{}: field 'rope_parameters.rope_type' is {}; the Qwen3.5 vision tower's rope is 'axial'", where,
               v.dump());
      } else {
        fail("{}: field 'rope_parameters.{}' is not supported by fp4lm's vision tower", where, k);
      }
    }
  }
  if (r.has("rope_theta")) c.rope_theta = r.get<double>("rope_theta");
  if (deepstack) {
    // transformers' default (8, 16, 24) when absent, as Qwen3VLVisionConfig's.
    c.deepstack_visual_indexes = r.has("deepstack_visual_indexes") ? r.int_list("deepstack_visual_indexes")
                                                                   : std::vector<int64_t>{8, 16, 24};
    for (size_t i = 0; i < c.deepstack_visual_indexes.size(); ++i) {
      const int64_t b = c.deepstack_visual_indexes[i];
      if (b < 0 || b >= c.depth)
        fail("{}: field 'deepstack_visual_indexes' holds {}, not a block of the tower (depth {})", where, b, c.depth);
      for (size_t k = 0; k < i; ++k)
        if (c.deepstack_visual_indexes[k] == b)
          fail("{}: field 'deepstack_visual_indexes' holds block {} twice", where, b);
    }
  } else if (r.has("deepstack_visual_indexes") && !r.int_list("deepstack_visual_indexes").empty())
    fail("{}: field 'deepstack_visual_indexes' is {}: Qwen3-VL's deepstack features are not part of Qwen3.5's tower, "
         "and fp4lm does not run them",
         where, j["deepstack_visual_indexes"].dump());
  static const char* known[] = {"depth",       "hidden_size",          "intermediate_size",   "num_heads",
                                "in_channels", "patch_size",           "temporal_patch_size", "spatial_merge_size",
                                "out_hidden_size", "num_position_embeddings", "num_attention_heads",
                                "num_hidden_layers", "hidden_act",     "rope_parameters",     "rope_theta",
                                "deepstack_visual_indexes"};
  for (const auto& [k, v] : j.items())
    if (!bookkeeping_key(k) && std::none_of(std::begin(known), std::end(known), [&](const char* n) { return k == n; }))
      fail("{}: unknown field '{}' (= {}); fp4lm does not know what it changes in the vision tower", where, k,
           v.dump());
  return c;
}

std::unique_ptr<Linear> dense_linear(const std::string& name, const void* weight, DType weight_dtype, int64_t n,
                                     int64_t k, std::vector<float> bias, DType act_dtype,
                                     std::shared_ptr<const void> keepalive, const std::string& forced) {
  const bool has_bias = !bias.empty();
  kernels::LinearWeights w;
  w.key = kernels::kUnquantized;
  w.n = n;
  w.k = k;
  w.shards.push_back({name, n, kernels::DenseView{weight_dtype, weight}});
  w.bias = std::move(bias);
  w.keepalive = std::move(keepalive);
  const kernels::LinearProblem p{kernels::kUnquantized, act_dtype, n, k, {}};
  const kernels::Selection sel = kernels::select_linear(p, name, forced);
  LayerScheme scheme;
  scheme.key = kernels::kUnquantized;
  scheme.act_dtype = act_dtype;
  return std::make_unique<Linear>(plan_linear(name, -1, {name}, {n}, k, has_bias), scheme, sel.backend->name,
                                  sel.backend->make_linear(std::move(w), p));
}

Qwen3_5VisionTower::Qwen3_5VisionTower(Qwen3_5VisionConfig config, Weights weights, std::string where)
    : config_(std::move(config)), w_(std::move(weights)), where_(std::move(where)) {
  const Qwen3_5VisionConfig& c = config_;
  if (c.hidden_size % c.num_heads != 0)
    fail("{}: hidden_size {} is not a multiple of num_heads {}", where_, c.hidden_size, c.num_heads);
  if (c.head_dim() % 4 != 0)
    fail("{}: head_dim (hidden_size / num_heads) {} is not a multiple of 4, which the 2-D rope needs", where_,
         c.head_dim());
  const auto side = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(c.num_position_embeddings))));
  if (side * side != c.num_position_embeddings)
    fail("{}: num_position_embeddings {} is not a square (the learned position grid is side x side)", where_,
         c.num_position_embeddings);
  const int64_t spatial = c.head_dim() / 2;
  for (int64_t j = 0; j < spatial; j += 2)
    inv_freq_.push_back(static_cast<float>(1.0 / std::pow(c.rope_theta, static_cast<double>(j) / spatial)));
}

std::unique_ptr<Qwen3_5VisionTower> Qwen3_5VisionTower::load(ModelLoader& l, bool deepstack) {
  const nlohmann::json& cj = l.checkpoint().config();
  if (!cj.contains("vision_config") || cj["vision_config"].is_null()) return nullptr;
  const std::string where = l.checkpoint().dir() + "/config.json: vision_config";
  // A text-only extract of a VL checkpoint keeps the wrapper's config.json: without the tower's
  // first tensor there is no tower (image inputs are refused); a tower stored in part is an error
  // naming the first tensor missing, below.
  if (!l.checkpoint().find("model.visual.patch_embed.proj.weight")) {
    log().info("{}: present, but the checkpoint stores no vision tower (no model.visual.patch_embed.proj.weight): "
               "the model runs text only and refuses image inputs",
               where);
    return nullptr;
  }
  Qwen3_5VisionConfig c = parse_qwen3_5_vision_config(cj["vision_config"], where, deepstack);
  if (c.out_hidden_size != l.config().hidden_size)
    fail("{}: out_hidden_size {} differs from the language model's hidden_size {}: the merger's rows replace "
         "token embeddings",
         where, c.out_hidden_size, l.config().hidden_size);
  const int64_t H = c.hidden_size, I = c.intermediate_size, M = H * c.spatial_merge_size * c.spatial_merge_size;
  const std::string v = "model.visual.";
  const auto linear = [&](const std::string& module, int64_t out, int64_t in) {
    return l.load_extra_linear(plan_linear(module, -1, {module}, {out}, in, true));
  };
  Weights w;
  {
    const std::string name = v + "patch_embed.proj.weight";
    const TensorView& t =
        l.tensor(name, {H, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size});
    // Copied: the Conv3d's kernel is the matmul's [hidden, patch_width] as stored.
    auto bytes = std::make_shared<std::vector<uint8_t>>(t.data, t.data + t.nbytes);
    w.patch_embed = dense_linear(v + "patch_embed.proj", bytes->data(), t.dtype, H, c.patch_width(),
                                 l.tensor_f32(v + "patch_embed.proj.bias", {H}), l.dtype(), bytes);
  }
  w.pos_embed = l.tensor_f32(v + "pos_embed.weight", {c.num_position_embeddings, H});
  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string b = fmt::format("{}blocks.{}.", v, i);
    Block blk;
    blk.norm1_w = l.tensor_f32(b + "norm1.weight", {H});
    blk.norm1_b = l.tensor_f32(b + "norm1.bias", {H});
    blk.norm2_w = l.tensor_f32(b + "norm2.weight", {H});
    blk.norm2_b = l.tensor_f32(b + "norm2.bias", {H});
    blk.qkv = linear(b + "attn.qkv", 3 * H, H);
    blk.proj = linear(b + "attn.proj", H, H);
    blk.fc1 = linear(b + "mlp.linear_fc1", I, H);
    blk.fc2 = linear(b + "mlp.linear_fc2", H, I);
    w.blocks.push_back(std::move(blk));
  }
  w.merger_norm_w = l.tensor_f32(v + "merger.norm.weight", {H});
  w.merger_norm_b = l.tensor_f32(v + "merger.norm.bias", {H});
  w.merger_fc1 = linear(v + "merger.linear_fc1", M, M);
  w.merger_fc2 = linear(v + "merger.linear_fc2", c.out_hidden_size, M);
  for (size_t j = 0; j < c.deepstack_visual_indexes.size(); ++j) {
    const std::string d = fmt::format("{}deepstack_merger_list.{}.", v, j);
    Weights::DeepstackMerger dm;
    dm.norm_w = l.tensor_f32(d + "norm.weight", {M});
    dm.norm_b = l.tensor_f32(d + "norm.bias", {M});
    dm.fc1 = linear(d + "linear_fc1", M, M);
    dm.fc2 = linear(d + "linear_fc2", c.out_hidden_size, M);
    w.deepstack.push_back(std::move(dm));
  }
  return std::make_unique<Qwen3_5VisionTower>(std::move(c), std::move(w), where);
}

void Qwen3_5VisionTower::check(const vision::QwenVlPixels& p) const {
  const Qwen3_5VisionConfig& c = config_;
  if (p.cols != c.patch_width())
    fail("pixel_values: {} values per patch, but the vision tower ({}: in_channels {} x temporal_patch_size {} x "
         "patch_size {}^2) takes {}",
         p.cols, where_, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_width());
  const vision::GridThw& g = p.grid;
  if (g.t <= 0 || g.h <= 0 || g.w <= 0 || g.h % c.spatial_merge_size != 0 || g.w % c.spatial_merge_size != 0)
    fail("image grid t x h x w = {} x {} x {}: each must be positive, h and w multiples of spatial_merge_size {} ({})",
         g.t, g.h, g.w, c.spatial_merge_size, where_);
  if (p.rows != g.t * g.h * g.w)
    fail("pixel_values: {} rows (patches), but the image grid t x h x w = {} x {} x {} has {}", p.rows, g.t, g.h, g.w,
         g.t * g.h * g.w);
  if (static_cast<int64_t>(p.pixel_values.size()) != p.rows * p.cols)
    fail("pixel_values: {} values, but {} rows x {} columns is {}", p.pixel_values.size(), p.rows, p.cols,
         p.rows * p.cols);
}

ImageEmbeddings Qwen3_5VisionTower::encode(const vision::QwenVlPixels& pixels) const {
  return std::move(encode_all({&pixels}).front());
}

double Qwen3_5VisionTower::flops(int64_t patches) const {
  const Qwen3_5VisionConfig& c = config_;
  const double n = static_cast<double>(patches), H = static_cast<double>(c.hidden_size);
  const double M = H * static_cast<double>(c.spatial_merge_size * c.spatial_merge_size);
  const double per_block = 2 * n * (3 * H * H + H * H + 2 * H * static_cast<double>(c.intermediate_size)) + 4 * n * n * H;
  const double mergers = 1.0 + static_cast<double>(c.deepstack_visual_indexes.size());
  return 2 * n * static_cast<double>(c.patch_width()) * H + static_cast<double>(c.depth) * per_block +
         mergers * 2 * (n / (M / H)) * (M * M + M * static_cast<double>(c.out_hidden_size));
}

std::vector<ImageEmbeddings> Qwen3_5VisionTower::encode_all(const std::vector<const vision::QwenVlPixels*>& images) const {
  const Qwen3_5VisionConfig& c = config_;
  ThreadPool& pool = ThreadPool::global();
  for (const vision::QwenVlPixels* p : images) check(*p);
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim(), heads = c.num_heads;
  const int64_t m = c.spatial_merge_size, unit = m * m, MH = H * unit;
  int64_t N = 0;
  for (const vision::QwenVlPixels* p : images) N += p->rows;

  // Patch embedding over every image's rows at once.
  std::vector<float> x(static_cast<size_t>(N * H));
  {
    std::vector<float> packed;
    const float* in = images.size() == 1 ? images[0]->pixel_values.data() : nullptr;
    if (!in) {
      packed.reserve(static_cast<size_t>(N * c.patch_width()));
      for (const vision::QwenVlPixels* p : images) packed.insert(packed.end(), p->pixel_values.begin(), p->pixel_values.end());
      in = packed.data();
    }
    w_.patch_embed->forward(in, N, x.data(), pool);
  }

  // Each patch's (row, col) in its frame (the processor's merge-window order), the interpolated
  // position embedding added, the rope angles' cos / sin per head dimension; and the frames
  // (attention segments).
  const int64_t side = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(c.num_position_embeddings))));
  std::vector<float> cosv(static_cast<size_t>(N * D)), sinv(static_cast<size_t>(N * D));
  std::vector<int64_t> segments = {0};
  {
    int64_t r = 0;
    const int64_t q = D / 4;
    for (const vision::QwenVlPixels* p : images) {
      const vision::GridThw& g = p->grid;
      const int64_t bw = g.w / m;
      for (int64_t f = 0; f < g.t; ++f) {
        for (int64_t k = 0; k < g.h * g.w; ++k, ++r) {
          const int64_t row = (k / (unit * bw)) * m + (k / m) % m, col = ((k / unit) % bw) * m + k % m;
          const Taps th = axis_taps(row, g.h, side), tw = axis_taps(col, g.w, side);
          const int64_t idx[4] = {th.t0 * side + tw.t0, th.t0 * side + tw.t1, th.t1 * side + tw.t0, th.t1 * side + tw.t1};
          const float wt[4] = {th.w0 * tw.w0, th.w0 * tw.w1, th.w1 * tw.w0, th.w1 * tw.w1};
          float* xr = x.data() + r * H;
          for (int64_t i = 0; i < H; ++i) {
            float s = 0;
            for (int j = 0; j < 4; ++j) s += w_.pos_embed[static_cast<size_t>(idx[j] * H + i)] * wt[j];
            xr[i] += s;
          }
          float* cr = cosv.data() + r * D;
          float* sr = sinv.data() + r * D;
          for (int64_t j = 0; j < q; ++j) {
            const double ah = static_cast<double>(row) * inv_freq_[static_cast<size_t>(j)];
            const double aw = static_cast<double>(col) * inv_freq_[static_cast<size_t>(j)];
            for (int64_t rep = 0; rep < 2; ++rep) {
              cr[rep * 2 * q + j] = static_cast<float>(std::cos(ah));
              sr[rep * 2 * q + j] = static_cast<float>(std::sin(ah));
              cr[rep * 2 * q + q + j] = static_cast<float>(std::cos(aw));
              sr[rep * 2 * q + q + j] = static_cast<float>(std::sin(aw));
            }
          }
        }
        segments.push_back(r);
      }
    }
  }

  std::vector<float> y(static_cast<size_t>(N * H)), qkv(static_cast<size_t>(N * 3 * H)), att(static_cast<size_t>(N * H));
  std::vector<float> hid(static_cast<size_t>(N * I));
  const int64_t T = N / unit;
  // The merger's MLP over T rows of MH (LN'd into y): fc1, exact GELU, fc2 into out [T, out_hidden_size].
  std::vector<float> mid(static_cast<size_t>(T * MH));
  const auto merge_mlp = [&](const Linear& fc1, const Linear& fc2, const float* in, std::vector<float>& out) {
    fc1.forward(in, T, mid.data(), pool);
    pool.parallel_for(T * MH, [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) mid[static_cast<size_t>(i)] = gelu_erf(mid[static_cast<size_t>(i)]);
    });
    out.resize(static_cast<size_t>(T * c.out_hidden_size));
    fc2.forward(mid.data(), T, out.data(), pool);
  };
  std::vector<std::vector<float>> deepstack;  // in block order, as transformers appends them
  for (size_t bi = 0; bi < w_.blocks.size(); ++bi) {
    const Block& b = w_.blocks[bi];
    vision_layer_norm(x.data(), N, H, b.norm1_w, b.norm1_b, kLayerNormEps, y.data(), pool);
    b.qkv->forward(y.data(), N, qkv.data(), pool);
    // RoPE on q and k in place, then bidirectional attention within each frame.
    pool.parallel_for(N, [&](int64_t r0, int64_t r1, int) {
      std::vector<float> tmp(static_cast<size_t>(D));
      for (int64_t r = r0; r < r1; ++r) {
        const float* cr = cosv.data() + r * D;
        const float* sr = sinv.data() + r * D;
        for (int64_t part = 0; part < 2; ++part)
          for (int64_t h = 0; h < heads; ++h) {
            float* v = qkv.data() + r * 3 * H + part * H + h * D;
            for (int64_t i = 0; i < D / 2; ++i) {
              tmp[static_cast<size_t>(i)] = v[i] * cr[i] - v[i + D / 2] * sr[i];
              tmp[static_cast<size_t>(i + D / 2)] = v[i + D / 2] * cr[i + D / 2] + v[i] * sr[i + D / 2];
            }
            std::memcpy(v, tmp.data(), static_cast<size_t>(D) * sizeof(float));
          }
      }
    });
    segment_attention(qkv.data(), qkv.data() + H, qkv.data() + 2 * H, 3 * H, heads, D, segments, att.data(), pool);
    b.proj->forward(att.data(), N, y.data(), pool);
    for (int64_t i = 0; i < N * H; ++i) x[static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
    vision_layer_norm(x.data(), N, H, b.norm2_w, b.norm2_b, kLayerNormEps, y.data(), pool);
    b.fc1->forward(y.data(), N, hid.data(), pool);
    activate(hid.data(), N * I, c.hidden_act, pool);
    b.fc2->forward(hid.data(), N, y.data(), pool);
    for (int64_t i = 0; i < N * H; ++i) x[static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
    const auto& ds = c.deepstack_visual_indexes;
    if (const auto it = std::find(ds.begin(), ds.end(), static_cast<int64_t>(bi)); it != ds.end()) {
      // DeepStack: the merge window's rows as one row of MH, normed over all of it.
      const auto& dm = w_.deepstack[static_cast<size_t>(it - ds.begin())];
      vision_layer_norm(x.data(), T, MH, dm.norm_w, dm.norm_b, kLayerNormEps, y.data(), pool);
      merge_mlp(*dm.fc1, *dm.fc2, y.data(), deepstack.emplace_back());
    }
  }

  // Merger: LN per patch, each merge window's `unit` consecutive rows as one row of MH.
  vision_layer_norm(x.data(), N, H, w_.merger_norm_w, w_.merger_norm_b, kLayerNormEps, y.data(), pool);
  std::vector<float> out;
  merge_mlp(*w_.merger_fc1, *w_.merger_fc2, y.data(), out);

  std::vector<ImageEmbeddings> result;
  int64_t row = 0;
  for (const vision::QwenVlPixels* p : images) {
    ImageEmbeddings e;
    e.rows = p->rows / unit;
    e.cols = c.out_hidden_size;
    e.values.assign(out.begin() + row * e.cols, out.begin() + (row + e.rows) * e.cols);
    for (const std::vector<float>& d : deepstack)
      e.deepstack.emplace_back(d.begin() + row * e.cols, d.begin() + (row + e.rows) * e.cols);
    row += e.rows;
    result.push_back(std::move(e));
  }
  return result;
}

}  // namespace fp4lm::model
