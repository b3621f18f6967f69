#include "model/vision/qwen2_5_vision_tower.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "model/layers/activation.h"
#include "model/config_reader.h"
#include "model/layer_plan.h"
#include "model/load/model_loader.h"
#include "model/vision/qwen3_5_vision_tower.h"
#include "model/vision/vision_ops.h"

namespace fp4lm::model {

namespace {

constexpr float kRmsNormEps = 1e-6f;  // transformers' Qwen2_5_VLRMSNorm / Qwen2-VL's LayerNorm eps, not a config key

// Keys of vision_config read by nothing: PreTrainedConfig's bookkeeping and the initializer.
bool bookkeeping_key(const std::string& k) {
  static const char* names[] = {"model_type", "initializer_range", "dtype", "torch_dtype", "_name_or_path",
                                "transformers_version", "architectures", "output_attentions",
                                "output_hidden_states", "return_dict", "chunk_size_feed_forward", "id2label",
                                "label2id", "problem_type", "tie_word_embeddings"};
  return std::any_of(std::begin(names), std::end(names), [&](const char* n) { return k == n; });
}

float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }

float act(float x, const std::string& a) {
  if (a == "silu") return silu(x);
  if (a == "quick_gelu") return x / (1.0f + std::exp(-1.702f * x));
  if (a == "gelu_pytorch_tanh") return gelu_tanh(x);
  return gelu_erf(x);
}

// y = x / sqrt(mean(x^2) + eps) * w per row of `dim` (the mean in double, the result in float32).
void rms_norm_rows(const float* x, int64_t rows, int64_t dim, const std::vector<float>& w, float* y, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      double ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      const auto inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + kRmsNormEps));
      for (int64_t i = 0; i < dim; ++i) yr[i] = w[static_cast<size_t>(i)] * (xr[i] * inv);
    }
  });
}

}  // namespace

Qwen2_5VisionConfig parse_qwen2_5_vision_config(const nlohmann::json& j, const std::string& where, bool qwen2) {
  if (!j.is_object()) fail("{}: must be an object, found {}", where, j.dump());
  const ConfigReader r{j, where};
  Qwen2_5VisionConfig c;
  if (qwen2) {
    // Qwen2VLVisionConfig: the tower is embed_dim wide, its MLP embed_dim x mlp_ratio, the merger
    // writes hidden_size; every block attends to its whole frame.
    c.qwen2 = true;
    c.hidden_act = "quick_gelu";
    c.depth = r.opt<int64_t>("depth", 32);
    if (r.has("num_hidden_layers")) c.depth = r.get<int64_t>("num_hidden_layers");
    c.hidden_size = r.opt<int64_t>("embed_dim", 1280);
    c.out_hidden_size = r.opt<int64_t>("hidden_size", 3584);
    const int64_t ratio = r.opt<int64_t>("mlp_ratio", 4);
    for (auto [k, v] : {std::pair{"depth", c.depth}, {"embed_dim", c.hidden_size}, {"hidden_size", c.out_hidden_size},
                        {"mlp_ratio", ratio}})
      r.positive(k, v);
    c.intermediate_size = c.hidden_size * ratio;
    c.fullatt_block_indexes.clear();
    for (int64_t b = 0; b < c.depth; ++b) c.fullatt_block_indexes.push_back(b);
  }
  static const char* ints[] = {"depth",       "hidden_size",         "intermediate_size",  "num_heads",
                               "in_channels", "patch_size",          "temporal_patch_size", "spatial_merge_size",
                               "out_hidden_size", "window_size",     "tokens_per_second"};
  int64_t* fields[] = {&c.depth,      &c.hidden_size,          &c.intermediate_size,  &c.num_heads,
                       &c.in_channels, &c.patch_size,          &c.temporal_patch_size, &c.spatial_merge_size,
                       &c.out_hidden_size, &c.window_size,     &c.tokens_per_second};
  for (size_t i = 0; i < std::size(ints); ++i) {
    // Qwen2-VL's depth / hidden_size are read above (hidden_size means another thing there).
    if (qwen2 && (i <= 2 || i == 8 || i == 9)) continue;
    *fields[i] = r.opt<int64_t>(ints[i], *fields[i]);
    r.positive(ints[i], *fields[i]);
  }
  // transformers' attribute_map aliases.
  if (r.has("num_attention_heads")) c.num_heads = r.get<int64_t>("num_attention_heads");
  if (!qwen2 && r.has("num_hidden_layers")) c.depth = r.get<int64_t>("num_hidden_layers");
  // The published configs' older spellings, which transformers 5 stores as unread attributes: they
  // must say what the keys it reads say (in_channels 3 by default, patch_size).
  if (r.has("in_chans") && r.get<int64_t>("in_chans") != c.in_channels)
    fail("{}: field 'in_chans' is {}, but in_channels (which transformers reads) is {}", where,
         j["in_chans"].dump(), c.in_channels);
  if (r.has("spatial_patch_size") && r.get<int64_t>("spatial_patch_size") != c.patch_size)
    fail("{}: field 'spatial_patch_size' is {}, but patch_size (which transformers reads) is {}", where,
         j["spatial_patch_size"].dump(), c.patch_size);
  if (!qwen2 && r.has("fullatt_block_indexes")) c.fullatt_block_indexes = r.int_list("fullatt_block_indexes");
  c.hidden_act = r.opt<std::string>("hidden_act", c.hidden_act);
  if (c.hidden_act != "silu" && c.hidden_act != "gelu_pytorch_tanh" && c.hidden_act != "gelu" &&
      c.hidden_act != "quick_gelu")
    fail("{}: field 'hidden_act' is '{}'; fp4lm's Qwen2-VL / Qwen2.5-VL towers implement silu, quick_gelu, "
         "gelu_pytorch_tanh and gelu",
         where, c.hidden_act);
  if (r.has("rope_parameters")) {
    const nlohmann::json& rp = j["rope_parameters"];
    if (!rp.is_object()) fail("{}: field 'rope_parameters' must be an object, found {}", where, rp.dump());
    for (const auto& [k, v] : rp.items()) {
      if (k == "rope_theta") {
        if (!v.is_number()) fail("{}: field 'rope_parameters.rope_theta' must be a number, found {}", where, v.dump());
        c.rope_theta = v.get<double>();
      } else if (k == "rope_type") {
        if (v != "axial" && v != "default")
          fail("{}: field 'rope_parameters.rope_type' is {}; the Qwen2.5-VL vision tower's rope is 'axial'", where,
               v.dump());
      } else {
        fail("{}: field 'rope_parameters.{}' is not supported by fp4lm's vision tower", where, k);
      }
    }
  }
  if (r.has("rope_theta")) c.rope_theta = r.get<double>("rope_theta");
  static const char* known[] = {"depth",       "hidden_size",        "intermediate_size",   "num_heads",
                                "in_channels", "patch_size",         "temporal_patch_size", "spatial_merge_size",
                                "out_hidden_size", "window_size",    "tokens_per_second",   "num_attention_heads",
                                "num_hidden_layers", "in_chans",     "spatial_patch_size",  "fullatt_block_indexes",
                                "hidden_act",  "rope_parameters",    "rope_theta"};
  static const char* known2[] = {"depth",        "embed_dim",         "hidden_size",         "mlp_ratio",
                                 "num_heads",    "in_channels",       "patch_size",          "temporal_patch_size",
                                 "spatial_merge_size", "num_attention_heads", "num_hidden_layers", "in_chans",
                                 "spatial_patch_size", "hidden_act",  "rope_parameters",     "rope_theta"};
  const auto is_known = [&](const std::string& k) {
    return qwen2 ? std::any_of(std::begin(known2), std::end(known2), [&](const char* n) { return k == n; })
                 : std::any_of(std::begin(known), std::end(known), [&](const char* n) { return k == n; });
  };
  for (const auto& [k, v] : j.items())
    if (!bookkeeping_key(k) && !is_known(k))
      fail("{}: unknown field '{}' (= {}); fp4lm does not know what it changes in the vision tower", where, k,
           v.dump());
  return c;
}

void qwen2_5_window_order(int64_t llm_h, int64_t llm_w, int64_t wu, std::vector<int64_t>& order,
                          std::vector<int64_t>& sizes) {
  for (int64_t wh = 0; wh * wu < llm_h; ++wh)
    for (int64_t ww = 0; ww * wu < llm_w; ++ww) {
      int64_t n = 0;
      for (int64_t i = wh * wu; i < std::min(llm_h, (wh + 1) * wu); ++i)
        for (int64_t k = ww * wu; k < std::min(llm_w, (ww + 1) * wu); ++k, ++n) order.push_back(i * llm_w + k);
      if (n > 0) sizes.push_back(n);
    }
}

Qwen2_5VisionTower::Qwen2_5VisionTower(Qwen2_5VisionConfig config, Weights weights, std::string where)
    : config_(std::move(config)), w_(std::move(weights)), where_(std::move(where)) {
  const Qwen2_5VisionConfig& c = config_;
  if (c.hidden_size % c.num_heads != 0)
    fail("{}: hidden_size {} is not a multiple of num_heads {}", where_, c.hidden_size, c.num_heads);
  if (c.head_dim() % 4 != 0)
    fail("{}: head_dim (hidden_size / num_heads) {} is not a multiple of 4, which the 2-D rope needs", where_,
         c.head_dim());
  if (c.window_units() < 1)
    fail("{}: window_size {} is smaller than one merge unit (spatial_merge_size {} x patch_size {} pixels)", where_,
         c.window_size, c.spatial_merge_size, c.patch_size);
  for (int64_t b : c.fullatt_block_indexes)
    if (b < 0 || b >= c.depth)
      fail("{}: field 'fullatt_block_indexes' holds {}, not a block of the tower (depth {})", where_, b, c.depth);
  const int64_t spatial = c.head_dim() / 2;
  for (int64_t j = 0; j < spatial; j += 2)
    inv_freq_.push_back(static_cast<float>(1.0 / std::pow(c.rope_theta, static_cast<double>(j) / spatial)));
}

std::unique_ptr<Qwen2_5VisionTower> Qwen2_5VisionTower::load(ModelLoader& l, bool qwen2) {
  const nlohmann::json& cj = l.checkpoint().config();
  if (!cj.contains("vision_config") || cj["vision_config"].is_null()) return nullptr;
  const std::string where = l.checkpoint().dir() + "/config.json: vision_config";
  // The published checkpoints' visual.*, or transformers' module names model.visual.*.
  std::string v = "visual.";
  if (!l.checkpoint().find(v + "patch_embed.proj.weight")) v = "model.visual.";
  if (!l.checkpoint().find(v + "patch_embed.proj.weight")) {
    log().info("{}: present, but the checkpoint stores no vision tower (no visual.patch_embed.proj.weight): the "
               "model runs text only and refuses image inputs",
               where);
    return nullptr;
  }
  Qwen2_5VisionConfig c = parse_qwen2_5_vision_config(cj["vision_config"], where, qwen2);
  if (c.out_hidden_size != l.config().hidden_size)
    fail("{}: out_hidden_size {} differs from the language model's hidden_size {}: the merger's rows replace "
         "token embeddings",
         where, c.out_hidden_size, l.config().hidden_size);
  const int64_t H = c.hidden_size, I = c.intermediate_size, M = H * c.spatial_merge_size * c.spatial_merge_size;
  const auto linear = [&](const std::string& module, int64_t out, int64_t in) {
    return l.load_extra_linear(plan_linear(module, -1, {module}, {out}, in, true));
  };
  Weights w;
  {
    const std::string name = v + "patch_embed.proj.weight";
    const TensorView& t = l.tensor(name, {H, c.in_channels, c.temporal_patch_size, c.patch_size, c.patch_size});
    // Copied: the Conv3d's kernel is the matmul's [hidden, patch_width] as stored.
    auto bytes = std::make_shared<std::vector<uint8_t>>(t.data, t.data + t.nbytes);
    w.patch_embed = dense_linear(v + "patch_embed.proj", bytes->data(), t.dtype, H, c.patch_width(), {}, l.dtype(), bytes);
  }
  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string b = fmt::format("{}blocks.{}.", v, i);
    Block blk;
    blk.norm1 = l.tensor_f32(b + "norm1.weight", {H});
    blk.norm2 = l.tensor_f32(b + "norm2.weight", {H});
    blk.qkv = linear(b + "attn.qkv", 3 * H, H);
    blk.proj = linear(b + "attn.proj", H, H);
    if (c.qwen2) {
      blk.norm1_b = l.tensor_f32(b + "norm1.bias", {H});
      blk.norm2_b = l.tensor_f32(b + "norm2.bias", {H});
      blk.up = linear(b + "mlp.fc1", I, H);
      blk.down = linear(b + "mlp.fc2", H, I);
    } else {
      blk.gate = linear(b + "mlp.gate_proj", I, H);
      blk.up = linear(b + "mlp.up_proj", I, H);
      blk.down = linear(b + "mlp.down_proj", H, I);
    }
    w.blocks.push_back(std::move(blk));
  }
  w.merger_norm = l.tensor_f32(v + "merger.ln_q.weight", {H});
  if (c.qwen2) w.merger_norm_b = l.tensor_f32(v + "merger.ln_q.bias", {H});
  w.merger_fc1 = linear(v + "merger.mlp.0", M, M);
  w.merger_fc2 = linear(v + "merger.mlp.2", c.out_hidden_size, M);
  return std::make_unique<Qwen2_5VisionTower>(std::move(c), std::move(w), where);
}

void Qwen2_5VisionTower::check(const vision::QwenVlPixels& p) const {
  const Qwen2_5VisionConfig& c = config_;
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

ImageEmbeddings Qwen2_5VisionTower::encode(const vision::QwenVlPixels& pixels) const {
  return std::move(encode_all({&pixels}).front());
}

std::vector<ImageEmbeddings> Qwen2_5VisionTower::encode_all(const std::vector<const vision::QwenVlPixels*>& images) const {
  const Qwen2_5VisionConfig& c = config_;
  ThreadPool& pool = ThreadPool::global();
  for (const vision::QwenVlPixels* p : images) check(*p);
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim(), heads = c.num_heads;
  const int64_t m = c.spatial_merge_size, unit = m * m, MH = H * unit;
  int64_t N = 0;
  for (const vision::QwenVlPixels* p : images) N += p->rows;
  const int64_t T = N / unit;

  // Patch embedding over every image's rows at once, in the processor's order.
  std::vector<float> x0(static_cast<size_t>(N * H));
  {
    std::vector<float> packed;
    const float* in = images.size() == 1 ? images[0]->pixel_values.data() : nullptr;
    if (!in) {
      packed.reserve(static_cast<size_t>(N * c.patch_width()));
      for (const vision::QwenVlPixels* p : images) packed.insert(packed.end(), p->pixel_values.begin(), p->pixel_values.end());
      in = packed.data();
    }
    w_.patch_embed->forward(in, N, x0.data(), pool);
  }

  // The window order of the merge units (`units[j]`: the processor-order unit at window-order
  // place j), the windows and the frames as attention segments over the reordered rows, and each
  // reordered row's rope cos / sin from its patch's (row, col) in its frame.
  std::vector<int64_t> units, windows = {0}, frames = {0};
  std::vector<float> cosv(static_cast<size_t>(N * D)), sinv(static_cast<size_t>(N * D));
  {
    int64_t base = 0;  // the first merge unit of the current frame
    std::vector<int64_t> order, sizes;
    for (const vision::QwenVlPixels* p : images) {
      const vision::GridThw& g = p->grid;
      const int64_t lh = g.h / m, lw = g.w / m;
      for (int64_t f = 0; f < g.t; ++f) {
        order.clear();
        sizes.clear();
        // Qwen2-VL: one window per frame, the processor's order kept.
        qwen2_5_window_order(lh, lw, c.qwen2 ? std::max(lh, lw) : c.window_units(), order, sizes);
        for (int64_t u : order) units.push_back(base + u);
        for (int64_t s : sizes) windows.push_back(windows.back() + s * unit);
        base += lh * lw;
        frames.push_back(base * unit);
      }
    }
    // Unit u of a frame of lw units a side holds patches (row, col) = ((u / lw) * m + k / m, (u % lw) * m + k % m).
    const int64_t q = D / 4;
    int64_t img_first_unit = 0;
    std::vector<std::pair<int64_t, int64_t>> unit_rc(static_cast<size_t>(T));  // unit -> (frame-local unit, lw)
    for (const vision::QwenVlPixels* p : images) {
      const int64_t lh = p->grid.h / m, lw = p->grid.w / m;
      for (int64_t u = 0; u < p->grid.t * lh * lw; ++u)
        unit_rc[static_cast<size_t>(img_first_unit + u)] = {u % (lh * lw), lw};
      img_first_unit += p->grid.t * lh * lw;
    }
    pool.parallel_for(T, [&](int64_t j0, int64_t j1, int) {
      for (int64_t j = j0; j < j1; ++j) {
        const auto [u, lw] = unit_rc[static_cast<size_t>(units[static_cast<size_t>(j)])];
        for (int64_t k = 0; k < unit; ++k) {
          const int64_t r = j * unit + k;  // the reordered row
          const int64_t row = (u / lw) * m + k / m, col = (u % lw) * m + k % m;
          float* cr = cosv.data() + r * D;
          float* sr = sinv.data() + r * D;
          for (int64_t i = 0; i < q; ++i) {
            // float32 products, as transformers' rotary embedding computes them.
            const float ah = static_cast<float>(row) * inv_freq_[static_cast<size_t>(i)];
            const float aw = static_cast<float>(col) * inv_freq_[static_cast<size_t>(i)];
            for (int64_t rep = 0; rep < 2; ++rep) {
              cr[rep * 2 * q + i] = std::cos(ah);
              sr[rep * 2 * q + i] = std::sin(ah);
              cr[rep * 2 * q + q + i] = std::cos(aw);
              sr[rep * 2 * q + q + i] = std::sin(aw);
            }
          }
        }
      }
    });
  }
  std::vector<float> x(static_cast<size_t>(N * H));
  pool.parallel_for(T, [&](int64_t j0, int64_t j1, int) {
    for (int64_t j = j0; j < j1; ++j)
      std::memcpy(x.data() + j * MH, x0.data() + units[static_cast<size_t>(j)] * MH, static_cast<size_t>(MH) * sizeof(float));
  });
  x0 = {};

  // RMSNorm (Qwen2.5-VL) or LayerNorm with its bias (Qwen2-VL), eps 1e-6 either way.
  const auto norm = [&](const float* in, int64_t rows, const std::vector<float>& w, const std::vector<float>& bias,
                        float* out) {
    if (c.qwen2) vision_layer_norm(in, rows, H, w, bias, kRmsNormEps, out, pool);
    else rms_norm_rows(in, rows, H, w, out, pool);
  };
  std::vector<float> y(static_cast<size_t>(N * H)), qkv(static_cast<size_t>(N * 3 * H)), att(static_cast<size_t>(N * H));
  std::vector<float> gate(static_cast<size_t>(N * I)), up(static_cast<size_t>(N * I));
  for (size_t bi = 0; bi < w_.blocks.size(); ++bi) {
    const Block& b = w_.blocks[bi];
    const bool full = std::find(c.fullatt_block_indexes.begin(), c.fullatt_block_indexes.end(),
                                static_cast<int64_t>(bi)) != c.fullatt_block_indexes.end();
    norm(x.data(), N, b.norm1, b.norm1_b, y.data());
    b.qkv->forward(y.data(), N, qkv.data(), pool);
    // RoPE on q and k in place, then bidirectional attention within each window (or frame).
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
    segment_attention(qkv.data(), qkv.data() + H, qkv.data() + 2 * H, 3 * H, heads, D, full ? frames : windows,
                      att.data(), pool);
    b.proj->forward(att.data(), N, y.data(), pool);
    for (int64_t i = 0; i < N * H; ++i) x[static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
    norm(x.data(), N, b.norm2, b.norm2_b, y.data());
    b.up->forward(y.data(), N, up.data(), pool);
    if (b.gate) {  // SwiGLU (Qwen2.5-VL)
      b.gate->forward(y.data(), N, gate.data(), pool);
      pool.parallel_for(N * I, [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i)
          gate[static_cast<size_t>(i)] = act(gate[static_cast<size_t>(i)], c.hidden_act) * up[static_cast<size_t>(i)];
      });
    } else {  // fc2(act(fc1(x))) (Qwen2-VL)
      pool.parallel_for(N * I, [&](int64_t i0, int64_t i1, int) {
        for (int64_t i = i0; i < i1; ++i) gate[static_cast<size_t>(i)] = act(up[static_cast<size_t>(i)], c.hidden_act);
      });
    }
    b.down->forward(gate.data(), N, y.data(), pool);
    for (int64_t i = 0; i < N * H; ++i) x[static_cast<size_t>(i)] += y[static_cast<size_t>(i)];
  }

  // Merger: RMSNorm per patch, each merge unit's `unit` consecutive rows as one row of MH, fc1,
  // exact GELU, fc2; then the units back in the processor's order.
  norm(x.data(), N, w_.merger_norm, w_.merger_norm_b, y.data());
  std::vector<float> mid(static_cast<size_t>(T * MH)), merged(static_cast<size_t>(T * c.out_hidden_size));
  w_.merger_fc1->forward(y.data(), T, mid.data(), pool);
  pool.parallel_for(T * MH, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) mid[static_cast<size_t>(i)] = gelu_erf(mid[static_cast<size_t>(i)]);
  });
  w_.merger_fc2->forward(mid.data(), T, merged.data(), pool);
  const int64_t O = c.out_hidden_size;
  std::vector<float> out(merged.size());
  for (int64_t j = 0; j < T; ++j)
    std::memcpy(out.data() + units[static_cast<size_t>(j)] * O, merged.data() + j * O, static_cast<size_t>(O) * sizeof(float));

  std::vector<ImageEmbeddings> result;
  int64_t row = 0;
  for (const vision::QwenVlPixels* p : images) {
    ImageEmbeddings e;
    e.rows = p->rows / unit;
    e.cols = O;
    e.values.assign(out.begin() + row * O, out.begin() + (row + e.rows) * O);
    row += e.rows;
    result.push_back(std::move(e));
  }
  return result;
}

}  // namespace fp4lm::model
