#include "model/vision/gemma4_vision_tower.h"

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

bool one_of(const std::string& k, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return k == n; });
}

// Keys that change nothing at inference: PreTrainedConfig's bookkeeping, the initializer, dropout.
bool bookkeeping(const std::string& k) {
  return one_of(k, {"model_type", "initializer_range", "dtype", "torch_dtype", "_name_or_path", "transformers_version",
                    "architectures", "output_attentions", "output_hidden_states", "return_dict",
                    "chunk_size_feed_forward", "id2label", "label2id", "problem_type", "tie_word_embeddings",
                    "attention_dropout"});
}

// y = x / rms(x) (· w when given) per row of `dim`, in float32 as Gemma4RMSNorm (the mean of
// squares accumulated in double).
void rms_rows(const float* x, int64_t rows, int64_t dim, const std::vector<float>* w, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const auto inv = static_cast<float>(std::pow(static_cast<float>(ss / static_cast<double>(dim)) + eps, -0.5));
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * (w ? (*w)[static_cast<size_t>(i)] : 1.0f);
  }
}

// rms_rows over the pool's threads (rows are independent).
void rms_rows(const float* x, int64_t rows, int64_t dim, const std::vector<float>* w, float eps, float* y,
              ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
    rms_rows(x + r0 * dim, r1 - r0, dim, w, eps, y + r0 * dim);
  });
}

}  // namespace

Gemma4VisionConfig parse_gemma4_vision_config(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: must be an object, found {}", where, j.dump());
  const ConfigReader r{j, where};
  Gemma4VisionConfig c;
  static const char* ints[] = {"hidden_size",       "intermediate_size",  "num_hidden_layers", "num_attention_heads",
                               "num_key_value_heads", "head_dim",          "pooling_kernel_size", "patch_size",
                               "position_embedding_size"};
  int64_t* fields[] = {&c.hidden_size,         &c.intermediate_size,   &c.num_hidden_layers, &c.num_attention_heads,
                       &c.num_key_value_heads, &c.head_dim,            &c.pooling_kernel_size, &c.patch_size,
                       &c.position_embedding_size};
  for (size_t i = 0; i < std::size(ints); ++i) {
    if (r.has(ints[i]) && !j[ints[i]].is_number_integer())
      fail("{}: field '{}' must be an integer, found {}", where, ints[i], j[ints[i]].dump());
    *fields[i] = r.opt<int64_t>(ints[i], *fields[i]);
    r.positive(ints[i], *fields[i]);
  }
  const std::string act = r.opt<std::string>("hidden_activation", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh")
    fail("{}: field 'hidden_activation' is '{}'; fp4lm's Gemma 4 vision tower implements gelu_pytorch_tanh", where,
         act);
  c.rms_norm_eps = r.opt<double>("rms_norm_eps", c.rms_norm_eps);
  if (!(c.rms_norm_eps > 0)) fail("{}: field 'rms_norm_eps' must be > 0, found {}", where, c.rms_norm_eps);
  c.use_clipped_linears = r.opt<bool>("use_clipped_linears", c.use_clipped_linears);
  c.standardize = r.opt<bool>("standardize", c.standardize);
  if (r.has("rope_parameters")) {
    const nlohmann::json& rp = j["rope_parameters"];
    if (!rp.is_object()) fail("{}: field 'rope_parameters' must be an object, found {}", where, rp.dump());
    for (const auto& [k, v] : rp.items()) {
      if (k == "rope_type") {
        // transformers 5.24 turns "default" into the vision config's default type, "axial".
        if (!v.is_string() || (v != "axial" && v != "default"))
          fail("{}: rope_parameters.rope_type is {}; Gemma 4's vision tower has the 2-D axial RoPE only (\"axial\", "
               "or \"default\", which transformers reads as axial)",
               where, v.dump());
      } else if (k == "rope_theta") {
        if (!v.is_number() || !(v.get<double>() > 0))
          fail("{}: rope_parameters.rope_theta must be a positive number, found {}", where, v.dump());
        c.rope_theta = v.get<double>();
      } else {
        fail("{}: unknown field 'rope_parameters.{}' (= {}); the axial RoPE reads rope_type and rope_theta", where, k,
             v.dump());
      }
    }
  }
  // global_head_dim appears in published vision configs; no vision module of transformers 5.24
  // reads it (every layer uses head_dim), so it is accepted only where it cannot mean anything else.
  if (r.has("global_head_dim") && r.get<int64_t>("global_head_dim") != c.head_dim)
    fail("{}: field 'global_head_dim' = {} differs from head_dim = {}; Gemma 4's vision layers all use head_dim",
         where, r.get<int64_t>("global_head_dim"), c.head_dim);
  if (c.head_dim % 4 != 0)
    fail("{}: head_dim {} must be a multiple of 4 (half of each head is rotated by x, half by y)", where, c.head_dim);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", where, c.num_attention_heads,
         c.num_key_value_heads);
  if (c.pooling_kernel_size < 2)
    fail("{}: pooling_kernel_size {} must be at least 2 (transformers' pooler skips pooling at 1 and then keeps the "
         "padding rows, not the image's)",
         where, c.pooling_kernel_size);
  for (const auto& [k, v] : j.items()) {
    if (bookkeeping(k)) continue;
    if (one_of(k, {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                   "num_key_value_heads", "head_dim", "pooling_kernel_size", "patch_size", "position_embedding_size",
                   "hidden_activation", "rms_norm_eps", "use_clipped_linears", "standardize", "rope_parameters",
                   "global_head_dim"}))
      continue;
    // Read by transformers 5.24's config class but by none of its vision modules: the vision
    // projections are bias-free whatever attention_bias says; max_position_embeddings is the
    // text side's; default_output_length is superseded by the processor's patch budget (the
    // output length is the pixel rows / pooling_kernel_size^2).
    if (one_of(k, {"attention_bias", "max_position_embeddings", "default_output_length"})) continue;
    fail("{}: unknown field '{}' (= {}); fp4lm does not know what it changes in Gemma 4's vision tower", where, k,
         v.dump());
  }
  return c;
}

void ClippedLinear::forward(const float* x, int64_t m, int64_t in, float* y, int64_t out,
                            std::vector<float>& scratch) const {
  if (!clip) {
    linear->forward(x, m, y);
    return;
  }
  scratch.resize(static_cast<size_t>(m * in));
  for (size_t i = 0; i < scratch.size(); ++i) scratch[i] = std::clamp(x[i], in_min, in_max);
  linear->forward(scratch.data(), m, y);
  for (int64_t i = 0; i < m * out; ++i) y[i] = std::clamp(y[i], out_min, out_max);
}

Gemma4VisionTower::Gemma4VisionTower(Gemma4VisionConfig config, Weights weights, DType act, std::string where)
    : config_(std::move(config)), w_(std::move(weights)), act_(act), where_(std::move(where)) {}

Gemma4VisionTower Gemma4VisionTower::load(ModelLoader& l, const std::string& p, Gemma4VisionConfig c,
                                          const std::string& where) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const int64_t Q = c.num_attention_heads * D, KV = c.num_key_value_heads * D;
  const auto clipped = [&](const std::string& name, int64_t out, int64_t in) {
    ClippedLinear cl;
    cl.linear = l.load_extra_linear(plan_linear(name + ".linear", -1, {name + ".linear"}, {out}, in));
    cl.clip = c.use_clipped_linears;
    float* bounds[] = {&cl.in_min, &cl.in_max, &cl.out_min, &cl.out_max};
    const char* names[] = {"input_min", "input_max", "output_min", "output_max"};
    for (size_t i = 0; i < 4; ++i) {
      const std::string t = name + "." + names[i];
      if (cl.clip) {
        if (!l.checkpoint().find(t))
          fail("{}: use_clipped_linears is true, but the checkpoint has no '{}' (each clipped projection stores its "
               "input_min, input_max, output_min and output_max)",
               where, t);
        *bounds[i] = l.tensor_f32(t, {})[0];
      } else if (l.checkpoint().find(t)) {
        fail("{}: the checkpoint stores '{}', but use_clipped_linears is false: transformers would not clamp with it; "
             "refusing rather than guessing which is meant",
             where, t);
      }
    }
    if (cl.clip && !(cl.in_min <= cl.in_max && cl.out_min <= cl.out_max))
      fail("{}: '{}' has empty clip ranges (input [{}, {}], output [{}, {}])", where, name, cl.in_min, cl.in_max,
           cl.out_min, cl.out_max);
    return cl;
  };
  Weights w;
  w.input_proj = l.load_extra_linear(
      plan_linear(p + "patch_embedder.input_proj", -1, {p + "patch_embedder.input_proj"}, {H}, c.patch_width()));
  {
    const std::vector<float> table =
        l.tensor_f32(p + "patch_embedder.position_embedding_table", {2, c.position_embedding_size, H});
    const auto half = static_cast<std::ptrdiff_t>(c.position_embedding_size * H);
    w.pos_x.assign(table.begin(), table.begin() + half);
    w.pos_y.assign(table.begin() + half, table.end());
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string b = fmt::format("{}encoder.layers.{}.", p, i);
    Layer ly;
    ly.input_norm = l.tensor_f32(b + "input_layernorm.weight", {H});
    ly.post_attention_norm = l.tensor_f32(b + "post_attention_layernorm.weight", {H});
    ly.pre_feedforward_norm = l.tensor_f32(b + "pre_feedforward_layernorm.weight", {H});
    ly.post_feedforward_norm = l.tensor_f32(b + "post_feedforward_layernorm.weight", {H});
    ly.q_norm = l.tensor_f32(b + "self_attn.q_norm.weight", {D});
    ly.k_norm = l.tensor_f32(b + "self_attn.k_norm.weight", {D});
    ly.q = clipped(b + "self_attn.q_proj", Q, H);
    ly.k = clipped(b + "self_attn.k_proj", KV, H);
    ly.v = clipped(b + "self_attn.v_proj", KV, H);
    ly.o = clipped(b + "self_attn.o_proj", H, Q);
    ly.gate = clipped(b + "mlp.gate_proj", I, H);
    ly.up = clipped(b + "mlp.up_proj", I, H);
    ly.down = clipped(b + "mlp.down_proj", H, I);
    w.layers.push_back(std::move(ly));
  }
  for (const auto& [t, dst] : {std::pair<const char*, std::vector<float>*>{"std_bias", &w.std_bias},
                                {"std_scale", &w.std_scale}}) {
    if (c.standardize)
      *dst = l.tensor_f32(p + t, {H});
    else if (l.checkpoint().find(p + t))
      fail("{}: the checkpoint stores '{}{}', but standardize is false: transformers would not apply it; refusing "
           "rather than guessing which is meant",
           where, p, t);
  }
  return Gemma4VisionTower(std::move(c), std::move(w), l.dtype(), where);
}

std::vector<float> Gemma4VisionTower::forward(const vision::Gemma4Pixels& px) const {
  const Gemma4VisionConfig& c = config_;
  ThreadPool& pool = ThreadPool::global();
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim, K = c.patch_width();
  const int64_t heads = c.num_attention_heads, kvh = c.num_key_value_heads, Q = heads * D, KV = kvh * D;
  const int64_t k = c.pooling_kernel_size, S = c.position_embedding_size;
  if (px.cols != K)
    fail("pixel_values: {} values per patch, but the vision tower ({}: 3 x patch_size {}^2) takes {}", px.cols, where_,
         c.patch_size, K);
  if (px.rows <= 0 || px.pixel_values.size() != static_cast<size_t>(px.rows * px.cols) ||
      px.position_ids.size() != static_cast<size_t>(px.rows * 2))
    fail("pixel_values: {} values and {} position ids for {} rows of {}", px.pixel_values.size(),
         px.position_ids.size(), px.rows, px.cols);
  if (px.rows % (k * k) != 0)
    fail("pixel_values: {} rows (max patches) do not pool evenly by pooling_kernel_size {}^2 ({})", px.rows, k, where_);
  // The real patches (transformers' padding: both coordinates -1); the tower runs on them alone,
  // since padding rows are masked out as keys and zeroed before pooling.
  std::vector<int64_t> real;
  int64_t max_x = 0;
  for (int64_t r = 0; r < px.rows; ++r) {
    const int64_t x = px.position_ids[static_cast<size_t>(2 * r)], y = px.position_ids[static_cast<size_t>(2 * r + 1)];
    if (x == -1 && y == -1) continue;
    if (x < 0 || y < 0 || x >= S || y >= S)
      fail("image_position_ids: patch {} is at ({}, {}), outside the vision tower's {} x {} position table "
           "(position_embedding_size, {})",
           r, x, y, S, S, where_);
    real.push_back(r);
    max_x = std::max(max_x, x);
  }
  const auto N = static_cast<int64_t>(real.size());
  if (N == 0) fail("pixel_values: no real patch (every position is padding)");
  const int64_t L = px.rows / (k * k), grid_w = (max_x + 1) / k;

  // Patch embedding: 2 (p - 0.5), input_proj, + the x and y position embeddings.
  std::vector<float> in(static_cast<size_t>(N * K)), x(static_cast<size_t>(N * H));
  for (int64_t i = 0; i < N; ++i) {
    const float* src = px.pixel_values.data() + real[static_cast<size_t>(i)] * K;
    for (int64_t j = 0; j < K; ++j) in[static_cast<size_t>(i * K + j)] = 2.0f * (src[j] - 0.5f);
  }
  w_.input_proj->forward(in.data(), N, x.data(), pool);
  in = {};
  std::vector<int64_t> px_x(static_cast<size_t>(N)), px_y(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) {
    px_x[static_cast<size_t>(i)] = px.position_ids[static_cast<size_t>(2 * real[static_cast<size_t>(i)])];
    px_y[static_cast<size_t>(i)] = px.position_ids[static_cast<size_t>(2 * real[static_cast<size_t>(i)] + 1)];
    for (int64_t h = 0; h < H; ++h)
      x[static_cast<size_t>(i * H + h)] += w_.pos_x[static_cast<size_t>(px_x[static_cast<size_t>(i)] * H + h)] +
                                           w_.pos_y[static_cast<size_t>(px_y[static_cast<size_t>(i)] * H + h)];
  }

  // The axial RoPE's tables: D/4 frequencies 1 / theta^(2j / (D/2)) in float32 (as transformers'
  // buffer), angles position * frequency in float32.
  const int64_t half = D / 2, quarter = D / 4;
  std::vector<float> inv_freq(static_cast<size_t>(quarter));
  for (int64_t j = 0; j < quarter; ++j)
    inv_freq[static_cast<size_t>(j)] = static_cast<float>(
        1.0 / std::pow(c.rope_theta, static_cast<double>(static_cast<float>(2 * j) / static_cast<float>(half))));
  std::vector<float> cosv(static_cast<size_t>(N * 2 * quarter)), sinv(cosv.size());
  for (int64_t i = 0; i < N; ++i)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t j = 0; j < quarter; ++j) {
        const float pos = static_cast<float>(a == 0 ? px_x[static_cast<size_t>(i)] : px_y[static_cast<size_t>(i)]);
        const float ang = pos * inv_freq[static_cast<size_t>(j)];
        cosv[static_cast<size_t>((i * 2 + a) * quarter + j)] = std::cos(ang);
        sinv[static_cast<size_t>((i * 2 + a) * quarter + j)] = std::sin(ang);
      }
  // One head in place: its first half rotated by x (rotate_half within the half), the second by y.
  const auto rope = [&](float* head, int64_t i) {
    for (int64_t a = 0; a < 2; ++a) {
      float* s = head + a * half;
      for (int64_t j = 0; j < quarter; ++j) {
        const float cs = cosv[static_cast<size_t>((i * 2 + a) * quarter + j)];
        const float sn = sinv[static_cast<size_t>((i * 2 + a) * quarter + j)];
        const float u = s[j], v = s[j + quarter];
        s[j] = u * cs - v * sn;
        s[j + quarter] = v * cs + u * sn;
      }
    }
  };

  const float eps = static_cast<float>(c.rms_norm_eps);
  const std::vector<int64_t> segments = {0, N};  // one image: every real patch sees every other
  // The kernel scales scores by 1/sqrt(head_dim); Gemma 4's scale is 1, so q is pre-multiplied.
  const float q_scale = std::sqrt(static_cast<float>(D));
  std::vector<float> h(static_cast<size_t>(N * H)), y(h.size()), scratch;
  std::vector<float> q(static_cast<size_t>(N * Q)), kk(static_cast<size_t>(N * KV)), vv(kk.size());
  std::vector<float> kq(q.size()), vq(q.size()), att(q.size());
  std::vector<float> g(static_cast<size_t>(N * I)), u(g.size());
  for (const Layer& ly : w_.layers) {
    rms_rows(x.data(), N, H, &ly.input_norm, eps, h.data(), pool);
    ly.q.forward(h.data(), N, H, q.data(), Q, scratch);
    ly.k.forward(h.data(), N, H, kk.data(), KV, scratch);
    ly.v.forward(h.data(), N, H, vv.data(), KV, scratch);
    pool.parallel_for(N, [&](int64_t r0, int64_t r1, int) {
      for (int64_t i = r0; i < r1; ++i) {
        for (int64_t hd = 0; hd < heads; ++hd) {
          float* qh = q.data() + i * Q + hd * D;
          rms_rows(qh, 1, D, &ly.q_norm, eps, qh);
          rope(qh, i);
          for (int64_t d = 0; d < D; ++d) qh[d] *= q_scale;
        }
        for (int64_t hd = 0; hd < kvh; ++hd) {
          float* kh = kk.data() + i * KV + hd * D;
          rms_rows(kh, 1, D, &ly.k_norm, eps, kh);
          rope(kh, i);
          float* vh = vv.data() + i * KV + hd * D;
          rms_rows(vh, 1, D, nullptr, eps, vh);
        }
        // Grouped KV heads repeated to every query head (transformers' repeat_kv).
        for (int64_t hd = 0; hd < heads; ++hd) {
          const int64_t src = hd / (heads / kvh);
          std::copy_n(kk.data() + i * KV + src * D, D, kq.data() + i * Q + hd * D);
          std::copy_n(vv.data() + i * KV + src * D, D, vq.data() + i * Q + hd * D);
        }
      }
    });
    segment_attention(q.data(), kq.data(), vq.data(), Q, heads, D, segments, att.data(), pool);
    ly.o.forward(att.data(), N, Q, y.data(), H, scratch);
    rms_rows(y.data(), N, H, &ly.post_attention_norm, eps, y.data(), pool);
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    rms_rows(x.data(), N, H, &ly.pre_feedforward_norm, eps, h.data(), pool);
    ly.gate.forward(h.data(), N, H, g.data(), I, scratch);
    ly.up.forward(h.data(), N, H, u.data(), I, scratch);
    pool.parallel_for(N * I, [&](int64_t i0, int64_t i1, int) {
      for (auto i = static_cast<size_t>(i0); i < static_cast<size_t>(i1); ++i) g[i] = gelu_tanh(g[i]) * u[i];
    });
    ly.down.forward(g.data(), N, I, y.data(), H, scratch);
    rms_rows(y.data(), N, H, &ly.post_feedforward_norm, eps, y.data(), pool);
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }

  // The pooler (transformers' _avg_pool_by_positions): patch (x, y) into output row
  // x / k + (max_x + 1) / k * (y / k), each row the mean of its k^2 patches; rows that no patch
  // reaches are dropped. Padding rows count at (0, 0) with zero hidden state (they only mark row 0).
  std::vector<float> sum(static_cast<size_t>(L * H), 0.0f);
  std::vector<char> used(static_cast<size_t>(L), 0);
  if (N < px.rows) used[0] = 1;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t idx = px_x[static_cast<size_t>(i)] / k + grid_w * (px_y[static_cast<size_t>(i)] / k);
    if (idx >= L)
      fail("image_position_ids: patch at ({}, {}) pools into soft token {}, but {} rows give {} ({})",
           px_x[static_cast<size_t>(i)], px_y[static_cast<size_t>(i)], idx, px.rows, L, where_);
    used[static_cast<size_t>(idx)] = 1;
    for (int64_t hh = 0; hh < H; ++hh) sum[static_cast<size_t>(idx * H + hh)] += x[static_cast<size_t>(i * H + hh)];
  }
  const float inv_k2 = 1.0f / static_cast<float>(k * k);
  const auto root = static_cast<float>(std::sqrt(static_cast<double>(H)));
  std::vector<float> out;
  for (int64_t r = 0; r < L; ++r) {
    if (!used[static_cast<size_t>(r)]) continue;
    for (int64_t hh = 0; hh < H; ++hh) {
      float v = sum[static_cast<size_t>(r * H + hh)] * inv_k2 * root;
      if (c.standardize) v = (v - w_.std_bias[static_cast<size_t>(hh)]) * w_.std_scale[static_cast<size_t>(hh)];
      out.push_back(v);
    }
  }
  round_to_dtype(out.data(), out.size(), act_);
  if (static_cast<int64_t>(out.size()) != px.soft_tokens * H)
    fail("pixel_values: the pooler gives {} soft tokens, but the processor counted {} for the prompt ({})",
         static_cast<int64_t>(out.size()) / H, px.soft_tokens, where_);
  return out;
}

}  // namespace fp4lm::model
