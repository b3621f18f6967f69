#include "model/model_loader.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/log.h"

namespace fp4lm::model {

using kernels::LinearWeights;
using kernels::WeightKey;
using kernels::WeightShard;

ModelLoader::ModelLoader(std::shared_ptr<io::Checkpoint> ckpt, EngineOptions opts)
    : ckpt_(std::move(ckpt)), opts_(std::move(opts)) {
  config_ = parse_model_config(ckpt_->config(), ckpt_->dir() + "/config.json");
  quant_ = quant::parse_quant_config(ckpt_->hf_quant_config(), ckpt_->config(), ckpt_->dir());
  dtype_ = resolve_dtype(opts_.dtype, config_.torch_dtype);
  layers_ = plan_layers(config_);
  if (quant_.quantized()) {
    log().info("Detected ModelOpt {} checkpoint (quant_algo={})", quant::algo_name(quant_.algo),
               quant::algo_name(quant_.algo));
    bool has_nvfp4 = quant_.algo == quant::QuantAlgo::NVFP4;
    for (const auto& [m, lq] : quant_.quantized_layers) has_nvfp4 |= lq.algo == quant::QuantAlgo::NVFP4;
    if (opts_.override_activation_dtype && has_nvfp4)
      log().info("NVFP4 W4A16 override active (override_activation_dtype={}): running NVFP4 layers through the "
                 "W4A16 path",
                 dtype_torch_name(*opts_.override_activation_dtype));
  }
  if (std::string w = disagreement_warning(quant_, layers_, tensor_lookup()); !w.empty()) log().warn("{}", w);
  check_forced_backends();
}

TensorLookup ModelLoader::tensor_lookup() const {
  return [ckpt = ckpt_](const std::string& name) -> std::optional<DType> {
    const TensorView* t = ckpt->find(name);
    return t ? std::optional<DType>(t->dtype) : std::nullopt;
  };
}

const LayerSpec& ModelLoader::layer(const std::string& name) const {
  for (const LayerSpec& s : layers_)
    if (s.name == name) return s;
  fail("{}: the model has no layer '{}'", ckpt_->dir(), name);
}

LayerReport ModelLoader::describe(const LayerSpec& spec) const {
  LayerReport r;
  r.spec = &spec;
  r.scheme = resolve_scheme(quant_, spec, opts_, dtype_, tensor_lookup());
  if (spec.kind == kernels::LayerKind::linear) {
    kernels::LinearProblem p{r.scheme.key, r.scheme.act_dtype, spec.out_features, spec.in_features,
                             {opts_.a16_max_tokens}};
    r.selection = kernels::select_linear(p, spec.name, opts_.linear_backend);
  } else {
    kernels::MoeProblem p{r.scheme.key, r.scheme.act_dtype, spec.num_experts, config_.top_k, spec.hidden, spec.inter,
                          {opts_.a16_max_tokens}};
    r.selection = kernels::select_moe(p, spec.name, opts_.moe_backend);
  }
  return r;
}

// ---- parameter validation (the methods' load rules) ----
namespace {

struct Params {
  const io::Checkpoint& ckpt;

  std::string where(const std::string& name) const {
    std::string file = ckpt.find(name) ? ckpt.file_of(name) : ckpt.dir();
    return fmt::format("{}: tensor '{}'", file, name);
  }
  const TensorView& require(const std::string& name, std::initializer_list<DType> dtypes, const Shape& shape) const {
    const TensorView* t = ckpt.find(name);
    if (!t) fail("{}: missing tensor '{}' (expected shape {})", ckpt.dir(), name, shape_str(shape));
    check(name, *t, dtypes, shape);
    return *t;
  }
  void check(const std::string& name, const TensorView& t, std::initializer_list<DType> dtypes, const Shape& shape) const {
    bool ok = false;
    std::string names;
    for (DType d : dtypes) {
      ok |= t.dtype == d;
      names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
    }
    if (!ok) fail("{}: expected dtype {}, found {}", where(name), names, dtype_name(t.dtype));
    if (t.shape != shape) fail("{}: expected shape {}, found {}", where(name), shape_str(shape), shape_str(t.shape));
  }
  // A global scale: F32 scalar, 0-d or [1]. nullopt when absent and not required.
  std::optional<float> scale(const std::string& name, bool required, bool allow_zero = false) const {
    const TensorView* t = ckpt.find(name);
    if (!t) {
      if (required) fail("{}: missing tensor '{}' (an F32 scalar scale)", ckpt.dir(), name);
      return std::nullopt;
    }
    if (t->dtype != DType::F32) fail("{}: expected dtype F32, found {}", where(name), dtype_name(t->dtype));
    if (!(t->shape.empty() || t->shape == Shape{1}))
      fail("{}: expected a scalar (shape [] or [1]), found {}", where(name), shape_str(t->shape));
    float v;
    std::memcpy(&v, t->data, sizeof v);
    if (!std::isfinite(v) || v < 0) fail("{}: scale must be finite and positive, found {}", where(name), v);
    if (v == 0 && !allow_zero) fail("{}: scale is zero", where(name));
    return v;
  }
  // A per-channel scale: [rows] or [rows, 1], F32/BF16/F16, each finite and > 0.
  std::vector<float> row_scales(const std::string& name, int64_t rows) const {
    const TensorView& t = *ckpt.find(name);
    if (t.shape != Shape{rows} && t.shape != Shape{rows, 1})
      fail("{}: expected a scalar or a per-channel scale of shape [{}] or [{}, 1], found {}", where(name), rows, rows,
           shape_str(t.shape));
    check(name, t, {DType::F32, DType::BF16, DType::F16}, t.shape);
    std::vector<float> v(static_cast<size_t>(rows));
    to_f32_n(t.data, t.dtype, v.data(), v.size());
    for (int64_t r = 0; r < rows; ++r)
      if (!std::isfinite(v[r]) || v[r] <= 0)
        fail("{}: scale of row {} must be finite and positive, found {}", where(name), r, v[r]);
    return v;
  }
};

}  // namespace

LinearWeights ModelLoader::linear_weights(const LayerSpec& spec, const LayerScheme& scheme) const {
  Params P{*ckpt_};
  LinearWeights w;
  w.key = scheme.key;
  w.n = spec.out_features;
  w.k = spec.in_features;
  w.keepalive = ckpt_;
  const int64_t k = w.k;
  const bool w4a4 = scheme.key.act == kernels::ActKey::nvfp4_dynamic;
  bool any_bias = false;
  std::vector<const TensorView*> biases;
  for (size_t i = 0; i < spec.shards.size(); ++i) {
    const std::string& m = spec.shards[i];
    const int64_t rows = spec.shard_rows[i];
    WeightShard s;
    s.name = m;
    s.rows = rows;
    switch (scheme.key.weight) {
      case WeightKey::unquantized: {
        const TensorView& t = P.require(m + ".weight", {DType::F32, DType::BF16, DType::F16}, {rows, k});
        s.dense_dtype = t.dtype;
        s.dense = t.data;
        break;
      }
      case WeightKey::nvfp4_static: {
        if (k % 16 != 0)
          fail("{}: NVFP4 layer {} has in_features {} which is not a multiple of 16", ckpt_->dir(), spec.name, k);
        s.codes = P.require(m + ".weight", {DType::U8}, {rows, k / 2}).data;
        s.block_scales = P.require(m + ".weight_scale", {DType::F8_E4M3}, {rows, k / 16}).data;
        s.global_scale = *P.scale(m + ".weight_scale_2", true);
        // W4A16 (on disk or by override) never needs input_scale: present ones are ignored.
        if (w4a4) s.input_scale = *P.scale(m + ".input_scale", true);
        break;
      }
      case WeightKey::fp8_static: {
        s.codes = P.require(m + ".weight", {DType::F8_E4M3}, {rows, k}).data;
        // Per-tensor (scalar) or per-channel ([rows] / [rows, 1]) weight_scale.
        if (const TensorView* ws = ckpt_->find(m + ".weight_scale"); ws && rows > 1 && !ws->shape.empty() && ws->shape[0] == rows)
          s.row_scales = P.row_scales(m + ".weight_scale", rows);
        else
          s.global_scale = *P.scale(m + ".weight_scale", true);
        // W8A16 (fp8_w8a16, or any W8A16 backend) never needs input_scale.
        if (scheme.key.act == kernels::ActKey::fp8_static) s.input_scale = *P.scale(m + ".input_scale", true);
        break;
      }
    }
    w.input_scale = std::max(w.input_scale, s.input_scale);
    const TensorView* b = ckpt_->find(m + ".bias");
    if (b) P.check(m + ".bias", *b, {DType::F32, DType::BF16, DType::F16}, {rows});
    if (!b && spec.bias) fail("{}: missing tensor '{}.bias' (shape [{}])", ckpt_->dir(), m, rows);
    any_bias |= b != nullptr;
    biases.push_back(b);
    w.shards.push_back(s);
  }
  if (any_bias) {
    w.bias.assign(static_cast<size_t>(w.n), 0.0f);
    int64_t row = 0;
    for (size_t i = 0; i < biases.size(); ++i) {
      if (biases[i]) to_f32_n(biases[i]->data, biases[i]->dtype, w.bias.data() + row, spec.shard_rows[i]);
      row += spec.shard_rows[i];
    }
  }
  return w;
}

kernels::MoeWeights ModelLoader::moe_weights(const LayerSpec& spec, const LayerScheme& scheme) const {
  kernels::MoeWeights mw;
  mw.key = scheme.key;
  mw.num_experts = spec.num_experts;
  mw.hidden = spec.hidden;
  mw.inter = spec.inter;
  mw.keepalive = ckpt_;
  const bool w4a4 = scheme.key.act == kernels::ActKey::nvfp4_dynamic;
  Params P{*ckpt_};
  // W4A4 experts: a missing or zero input_scale takes the max of the layer's other experts
  // (ModelOpt leaves it unset for experts calibration never routed to).
  std::vector<std::optional<float>> in13, in2;
  LayerScheme no_act = scheme;
  if (w4a4) no_act.key = kernels::kNvfp4W4A16;  // gather without requiring input_scale
  for (int64_t e = 0; e < spec.num_experts; ++e) {
    const std::string base = fmt::format("{}.{}.", spec.shards[0], e);
    LayerSpec w13;
    w13.name = base + "w13";
    w13.shards = {base + spec.expert_proj[0], base + spec.expert_proj[1]};
    w13.shard_rows = {spec.inter, spec.inter};
    w13.in_features = spec.hidden;
    w13.out_features = 2 * spec.inter;
    LayerSpec w2;
    w2.name = base + spec.expert_proj[2];
    w2.shards = {base + spec.expert_proj[2]};
    w2.shard_rows = {spec.hidden};
    w2.in_features = spec.inter;
    w2.out_features = spec.hidden;
    mw.w13.push_back(linear_weights(w13, no_act));
    mw.w2.push_back(linear_weights(w2, no_act));
    if (w4a4) {
      auto read = [&](const std::vector<std::string>& mods) {
        std::optional<float> v;
        for (const auto& m : mods)
          if (auto s = P.scale(m + ".input_scale", false, true); s && *s > 0) v = std::max(v.value_or(0.0f), *s);
        return v;
      };
      in13.push_back(read(w13.shards));
      in2.push_back(read(w2.shards));
    }
  }
  if (w4a4) {
    auto fill = [&](std::vector<std::optional<float>>& v, std::vector<LinearWeights>& ws, const char* what) {
      float mx = 0;
      int missing = 0;
      for (auto& s : v) s ? mx = std::max(mx, *s) : ++missing;
      if (mx == 0)
        fail("{}: no expert of {} has a usable {} input_scale (W4A4 needs one)", ckpt_->dir(), spec.name, what);
      if (missing)
        log().warn("{}: {} of {} experts have no {} input_scale; using the max of the others ({})", spec.name,
                   missing, v.size(), what, mx);
      for (size_t e = 0; e < ws.size(); ++e) {
        ws[e].key = scheme.key;
        ws[e].input_scale = v[e].value_or(mx);
        for (auto& s : ws[e].shards) s.input_scale = ws[e].input_scale;
      }
    };
    fill(in13, mw.w13, "gate/up");
    fill(in2, mw.w2, "down");
  }
  return mw;
}

void ModelLoader::log_selection(const LayerReport& r) {
  std::string msg = kernels::selection_message(r.selection, r.spec->kind, r.scheme.key);
  if (logged_.emplace(msg, true).second) log().info("{}", msg);
  if (r.scheme.key == kernels::kNvfp4W4A4 && r.selection.backend->weight_key_only)
    log().warn("{}: W4A16 backend '{}' forced on a W4A4 layer: activations will not be quantized", r.spec->name,
               r.selection.backend->name);
}

std::unique_ptr<Linear> ModelLoader::load_linear(const std::string& name) {
  const LayerSpec& spec = layer(name);
  if (spec.kind != kernels::LayerKind::linear) fail("layer {} is not a Linear layer", name);
  LayerReport r = describe(spec);
  log_selection(r);
  kernels::LinearProblem p{r.scheme.key, r.scheme.act_dtype, spec.out_features, spec.in_features,
                           {opts_.a16_max_tokens}};
  auto kernel = r.selection.backend->make_linear(linear_weights(spec, r.scheme), p);
  loaded_bytes_ += kernel->weight_bytes();
  auto linear = std::make_unique<Linear>(spec, r.scheme, r.selection.backend->name, std::move(kernel));
  if (opts_.on_linear_built) opts_.on_linear_built(*linear);
  return linear;
}

std::unique_ptr<FusedMoe> ModelLoader::load_moe(const std::string& name) {
  const LayerSpec& spec = layer(name);
  if (spec.kind != kernels::LayerKind::moe) fail("layer {} is not a MoE layer", name);
  LayerReport r = describe(spec);
  log_selection(r);
  kernels::MoeProblem p{r.scheme.key, r.scheme.act_dtype, spec.num_experts, config_.top_k, spec.hidden, spec.inter,
                        {opts_.a16_max_tokens}};
  auto kernel = r.selection.backend->make_moe(moe_weights(spec, r.scheme), p);
  loaded_bytes_ += kernel->weight_bytes();
  auto moe = std::make_unique<FusedMoe>(spec, r.scheme, r.selection.backend->name, std::move(kernel));
  if (opts_.on_moe_built) opts_.on_moe_built(*moe);
  return moe;
}

const TensorView& ModelLoader::tensor(const std::string& name, const Shape& expected) const {
  return Params{*ckpt_}.require(name, {DType::F32, DType::BF16, DType::F16}, expected);
}

std::vector<float> ModelLoader::tensor_f32(const std::string& name, const Shape& expected) const {
  const TensorView& t = tensor(name, expected);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  to_f32_n(t.data, t.dtype, out.data(), out.size());
  return out;
}

}  // namespace fp4lm::model
