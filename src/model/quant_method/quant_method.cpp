#include "model/quant_method/quant_method.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace fp4lm::model {

const QuantMethod& quant_method(const quant::DiskFormat& f) {
  switch (f.scheme) {
    case quant::Scheme::unquantized: return unquantized_method();
    case quant::Scheme::nvfp4:
    case quant::Scheme::nvfp4_a16:
    case quant::Scheme::nvfp4_fp8:
      return f.family == quant::Family::compressed_tensors ? compressed_tensors_nvfp4_method() : nvfp4_method();
    case quant::Scheme::fp8:
    case quant::Scheme::fp8_a16:
    case quant::Scheme::fp8_dynamic:
    case quant::Scheme::fp8_pc_pt: return fp8_method();
    case quant::Scheme::fp8_block:
    case quant::Scheme::fp8_block_a16:
      if (f.family == quant::Family::modelopt) return modelopt_fp8_pb_wo_method();
      return f.family == quant::Family::compressed_tensors ? compressed_tensors_fp8_block_method() : fp8_block_method();
    case quant::Scheme::mxfp8: return modelopt_mxfp8_method();
    case quant::Scheme::mxfp4: return mxfp4_method();
    case quant::Scheme::mxfp4_fp8: return modelopt_mxfp4_method();
    case quant::Scheme::int8_a16:
    case quant::Scheme::int8_sq: return modelopt_int8_method();
    case quant::Scheme::int4:
      if (f.family == quant::Family::gptq) return gptq_method();
      if (f.family == quant::Family::awq) return awq_method();
      if (f.family == quant::Family::compressed_tensors) return compressed_tensors_int4_method();
      if (f.family == quant::Family::modelopt) return modelopt_int4_method();
      break;
  }
  fail("no quantization method for {} {}", quant::family_name(f.family), quant::scheme_name(f.scheme));
}

quant::Scheme detect_scheme(quant::Family family, const TensorLookup& tensors, const std::string& module) {
  if (family == quant::Family::fine_grained_fp8) {
    for (const QuantMethod* m : {&fp8_block_method(), &fp8_method()})
      if (std::optional<quant::Scheme> s = m->detect(tensors, module)) return *s;
    return quant::Scheme::unquantized;
  }
  if (family == quant::Family::gptq || family == quant::Family::awq) {
    const QuantMethod& m = family == quant::Family::gptq ? gptq_method() : awq_method();
    if (std::optional<quant::Scheme> s = m.detect(tensors, module)) return *s;
    return quant::Scheme::unquantized;
  }
  if (family == quant::Family::mxfp4) {
    if (std::optional<quant::Scheme> s = mxfp4_method().detect(tensors, module)) return *s;
    return quant::Scheme::unquantized;
  }
  const QuantMethod& nvfp4 =
      family == quant::Family::compressed_tensors ? compressed_tensors_nvfp4_method() : nvfp4_method();
  for (const QuantMethod* m : {&fp8_method(), &nvfp4})
    if (std::optional<quant::Scheme> s = m->detect(tensors, module)) return *s;
  const QuantMethod& int4 =
      family == quant::Family::compressed_tensors ? compressed_tensors_int4_method() : modelopt_int4_method();
  if (std::optional<quant::Scheme> s = int4.detect(tensors, module)) return *s;
  if (family == quant::Family::modelopt)
    for (const QuantMethod* m : {&modelopt_int8_method(), &modelopt_mxfp4_method()})
      if (std::optional<quant::Scheme> s = m->detect(tensors, module)) return *s;
  return quant::Scheme::unquantized;
}

// AWQ's `<module>.pre_quant_scale` [k] (F32/BF16/F16, each finite and > 0) of every shard: the
// shards of a fused layer share one input, so they must all store the same scale or none
// (ModelOpt's export resmooths fused shards to one). Empty when none stores one.
std::vector<float> read_pre_quant_scale(const ParamReader& p, const LayerSpec& spec) {
  std::vector<float> out;
  std::string with, without;
  for (const std::string& m : spec.shards) {
    const std::string name = m + ".pre_quant_scale";
    const TensorView* t = p.optional(name, {DType::F32, DType::BF16, DType::F16}, {spec.in_features});
    if (!t) {
      if (without.empty()) without = m;
      continue;
    }
    std::vector<float> v(static_cast<size_t>(spec.in_features));
    to_f32_n(t->data, t->dtype, v.data(), v.size());
    for (size_t j = 0; j < v.size(); ++j)
      if (!std::isfinite(v[j]) || v[j] <= 0)
        fail("{}: channel {} of the pre_quant_scale must be finite and positive, found {}", p.where(name), j, v[j]);
    if (with.empty()) {
      with = m;
      out = std::move(v);
    } else if (v != out) {
      fail("{}: the shards of fused layer {} hold different pre_quant_scale values ({} and {}); they share one "
           "input, so one scale must serve them all (ModelOpt's export resmooths fused shards to one)",
           p.checkpoint().dir(), spec.name, with, m);
    }
  }
  if (!with.empty() && !without.empty())
    fail("{}: fused layer {}: {} stores a pre_quant_scale and {} does not; they share one input, so they must both "
         "store the same one",
         p.checkpoint().dir(), spec.name, with, without);
  return out;
}

kernels::LinearWeights QuantMethod::linear(const ParamReader& p, const LayerSpec& spec,
                                           const LayerScheme& scheme) const {
  kernels::LinearWeights w;
  w.key = scheme.key;
  w.per_token_input_scale = scheme.dynamic_activation_scale;
  w.n = spec.out_features;
  w.k = spec.in_features;
  w.keepalive = p.keepalive();
  bool any_bias = false;
  std::vector<const TensorView*> biases;
  for (size_t i = 0; i < spec.shards.size(); ++i) {
    const std::string& m = spec.shards[i];
    const int64_t rows = spec.shard_rows[i];
    kernels::WeightShard s;
    s.name = m;
    s.rows = rows;
    s.view = shard(p, spec, m, rows, scheme);
    w.input_scale = std::max(w.input_scale, s.input_scale());
    const TensorView* b = p.optional(m + ".bias", {DType::F32, DType::BF16, DType::F16}, {rows});
    if (!b && spec.bias) fail("{}: missing tensor '{}.bias' (shape [{}])", p.checkpoint().dir(), m, rows);
    any_bias |= b != nullptr;
    biases.push_back(b);
    w.shards.push_back(std::move(s));
  }
  std::vector<std::shared_ptr<const void>> owned;
  for (const kernels::WeightShard& s : w.shards)
    if (const auto* v = std::get_if<kernels::Nvfp4View>(&s.view); v && v->owned) owned.push_back(v->owned);
  if (!owned.empty()) {
    owned.push_back(std::move(w.keepalive));
    w.keepalive = std::make_shared<const std::vector<std::shared_ptr<const void>>>(std::move(owned));
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

std::pair<LayerSpec, LayerSpec> QuantMethod::expert_specs(const LayerSpec& spec, int64_t e) {
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
  return {std::move(w13), std::move(w2)};
}

kernels::MoeWeights QuantMethod::moe_without_experts(const LayerSpec& spec, const LayerScheme& scheme,
                                                     std::shared_ptr<const void> keepalive) {
  kernels::MoeWeights mw;
  mw.key = scheme.key;
  mw.num_experts = spec.num_experts;
  mw.hidden = spec.hidden;
  mw.inter = spec.inter;
  mw.keepalive = std::move(keepalive);
  return mw;
}

kernels::LinearWeights QuantMethod::expert_projection(const kernels::MoeWeights& mw, std::string name, int64_t rows,
                                                      int64_t k, kernels::ShardView view) {
  kernels::LinearWeights w;
  w.key = mw.key;
  w.n = rows;
  w.k = k;
  w.keepalive = mw.keepalive;
  w.shards.push_back({std::move(name), rows, std::move(view)});
  return w;
}

kernels::MoeWeights QuantMethod::moe(const ParamReader& p, const LayerSpec& spec, const LayerScheme& scheme) const {
  if (spec.expert_layout == LayerSpec::ExpertLayout::gpt_oss)
    fail("{}: {}: gpt-oss's fused experts are read unquantized or MXFP4, not as {} {}", p.checkpoint().dir(), spec.name,
         quant::family_name(scheme.on_disk.family), quant::scheme_name(scheme.on_disk.scheme));
  kernels::MoeWeights mw = moe_without_experts(spec, scheme, p.keepalive());
  for (int64_t e = 0; e < spec.num_experts; ++e) {
    auto [w13, w2] = expert_specs(spec, e);
    mw.w13.push_back(linear(p, w13, scheme));
    mw.w2.push_back(linear(p, w2, scheme));
  }
  return mw;
}

}  // namespace fp4lm::model

namespace fp4lm::model {

void QuantMethod::add_gpt_oss_expert_biases(const ParamReader& p, const LayerSpec& spec, kernels::MoeWeights& mw) {
  const std::string& box = spec.shards[0];
  const int64_t e_n = spec.num_experts;
  auto read = [&](const std::string& name, int64_t rows, std::vector<kernels::LinearWeights>& ws) {
    const TensorView& b = p.require(box + "." + name, {DType::F32, DType::BF16, DType::F16}, {e_n, rows});
    for (int64_t e = 0; e < e_n; ++e) {
      ws[e].bias.resize(static_cast<size_t>(rows));
      to_f32_n(b.data + static_cast<size_t>(e * rows) * dtype_size(b.dtype), b.dtype, ws[e].bias.data(),
               ws[e].bias.size());
    }
  };
  read("gate_up_proj_bias", 2 * spec.inter, mw.w13);
  read("down_proj_bias", spec.hidden, mw.w2);
}

}  // namespace fp4lm::model
