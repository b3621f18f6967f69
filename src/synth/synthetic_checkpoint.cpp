#include "synth/synthetic_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/arch/arch.h"
#include "model/layer_plan.h"
#include "model/layer_scheme.h"
#include "quant/mxfp8.h"
#include "quant/nvfp4.h"

namespace fp4lm::synth {

using namespace model;
using nlohmann::json;
using quant::QuantAlgo;

namespace {
// The group_size ModelOpt's export writes for each algorithm (FP8_PB_WO and the int8 ones: none).
nlohmann::json synthetic_group_size(quant::QuantAlgo a) {
  if (a == quant::QuantAlgo::W4A8_NVFP4_FP8 || a == quant::QuantAlgo::MXFP8) return 32;
  if (a == quant::QuantAlgo::FP8_PB_WO || a == quant::QuantAlgo::W8A16 || a == quant::QuantAlgo::W8A8_SQ_PER_CHANNEL)
    return nullptr;
  return 16;
}
}  // namespace

namespace {
bool is_vl(const SyntheticOptions& o) { return o.architecture.ends_with("ForConditionalGeneration"); }
}  // namespace

json synthetic_config_json(const SyntheticOptions& o) {
  json c = {{"architectures", {o.architecture}},
            {"vocab_size", o.vocab},
            {"hidden_size", o.hidden},
            {"num_hidden_layers", o.layers},
            {"num_attention_heads", o.heads},
            {"num_key_value_heads", o.kv_heads},
            {"head_dim", o.head_dim},
            {"intermediate_size", o.intermediate},
            {"max_position_embeddings", 512},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", 10000.0},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", o.tie_word_embeddings},
            {"bos_token_id", 1},
            {"eos_token_id", 2},
            {"torch_dtype", std::string(dtype_torch_name(o.dense_dtype))}};
  // An unknown name gets the shared keys only; parsing it then names the supported ones.
  if (const ArchDef* a = find_arch(o.architecture)) a->synthetic_config(o, c);
  c.update(o.config_overrides);
  if (!is_vl(o)) return c;
  json text = c;
  text.erase("architectures");
  // The wrapper's model_type is the text model's without "_text" (qwen3_5_moe_text -> qwen3_5_moe).
  std::string type = text.value("model_type", std::string());
  if (type.ends_with("_text")) type.resize(type.size() - 5);
  return {{"architectures", {o.architecture}},
          {"model_type", type},
          {"text_config", text},
          {"vision_config", {{"depth", 1}, {"hidden_size", 16}, {"out_hidden_size", o.hidden}}},
          {"tie_word_embeddings", o.tie_word_embeddings},
          {"torch_dtype", std::string(dtype_torch_name(o.dense_dtype))}};
}

namespace {

struct Writer {
  const SyntheticOptions& o;
  io::SafetensorsWriter st;
  std::mt19937_64 rng;
  std::string prefix = "model.";  // where the text model's "model." tensors go (VL: model.language_model.)

  std::vector<std::pair<std::string, std::string>> renames = {};  // ModelConfig::tensor_renames

  std::string mtp_layer = {};  // "model.layers.<num_layers>.": the MTP head's layer, written as mtp.layers.0.

  std::string on_disk(const std::string& name) const {
    for (const auto& [engine, disk] : renames)
      if (name == engine) return disk;
    if (!mtp_layer.empty() && name.compare(0, mtp_layer.size(), mtp_layer) == 0)
      return "mtp.layers.0." + name.substr(mtp_layer.size());
    return name.compare(0, 6, "model.") == 0 ? prefix + name.substr(6) : name;
  }

  // random_codes: the tensors in file order, each with what fills it when streamed (write_streamed).
  enum class Fill { bytes, nvfp4_codes, e4m3_scales, fp8_codes, uniform };
  struct Planned {
    std::string name;
    DType dtype;
    Shape shape;
    Fill fill;
    float stddev = 0;
    std::vector<uint8_t> bytes = {};  // Fill::bytes
  };
  std::vector<Planned> planned = {};

  void put(const std::string& name, DType dtype, const Shape& shape, std::vector<uint8_t> bytes) {
    if (o.random_codes) planned.push_back({on_disk(name), dtype, shape, Fill::bytes, 0, std::move(bytes)});
    else st.add(on_disk(name), dtype, shape, std::move(bytes));
  }
  void put_f32(const std::string& name, const Shape& shape, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(float));
    std::memcpy(b.data(), v.data(), b.size());
    put(name, DType::F32, shape, std::move(b));
  }

  std::vector<float> randn(int64_t count, float stddev) {
    std::normal_distribution<float> d(0.0f, stddev);
    std::vector<float> v(static_cast<size_t>(count));
    for (float& x : v) x = d(rng);
    return v;
  }
  void dense(const std::string& name, const Shape& shape, const std::vector<float>& v) {
    std::vector<uint8_t> bytes(v.size() * dtype_size(o.dense_dtype));
    from_f32_n(v.data(), o.dense_dtype, bytes.data(), v.size());
    put(name, o.dense_dtype, shape, std::move(bytes));
  }
  void scalar(const std::string& name, float v) { put_f32(name, {}, {v}); }
  // A weight of random values with standard deviation `stddev`: normal, or with random_codes
  // uniform and filled only when streamed (an embedding table can be GBs).
  void random_dense(const std::string& name, const Shape& shape, float stddev) {
    if (o.random_codes) planned.push_back({on_disk(name), o.dense_dtype, shape, Fill::uniform, stddev});
    else dense(name, shape, randn(shape_numel(shape), stddev));
  }

  // random_codes: a fused group's modules as random codes and scales in `algo`'s layout. NVFP4:
  // E4M3 block scales 0.5..1.875 and E2M1 codes (|x| ~ sqrt(8.6) on average), weight_scale_2 so
  // that |w| ~ 1/sqrt(k); FP8: codes of |x| in [2^-3, 3.75] (rms ~ 1.26), weight_scale 1/(1.26 sqrt(k)).
  void random_linear_group(const std::vector<std::string>& modules, const std::vector<int64_t>& rows, int64_t k,
                           QuantAlgo algo, bool bias) {
    const float gain = 1.0f / std::sqrt(static_cast<float>(k));
    for (size_t i = 0; i < modules.size(); ++i) {
      const std::string& m = modules[i];
      const int64_t n = rows[i];
      switch (algo) {
        case QuantAlgo::None:
        case QuantAlgo::MIXED_PRECISION: random_dense(m + ".weight", {n, k}, gain); break;
        case QuantAlgo::NVFP4:
        case QuantAlgo::NVFP4_AWQ:
        case QuantAlgo::W4A16_NVFP4:
          planned.push_back({on_disk(m + ".weight"), DType::U8, {n, k / 2}, Fill::nvfp4_codes});
          planned.push_back({on_disk(m + ".weight_scale"), DType::F8_E4M3, {n, k / 16}, Fill::e4m3_scales});
          scalar(m + ".weight_scale_2", gain / std::sqrt(8.6f));
          if (algo != QuantAlgo::W4A16_NVFP4) scalar(m + ".input_scale", 8.0f / 2688.0f);
          break;
        case QuantAlgo::FP8:
          planned.push_back({on_disk(m + ".weight"), DType::F8_E4M3, {n, k}, Fill::fp8_codes});
          scalar(m + ".weight_scale", gain / 1.26f);
          scalar(m + ".input_scale", 8.0f / 448.0f);
          break;
        default:
          fail("synthetic checkpoint: random_codes writes NVFP4, NVFP4_AWQ, W4A16_NVFP4, FP8 or unquantized Linears, "
               "not {}",
               quant::algo_name(algo));
      }
      if (bias) random_dense(m + ".bias", {n}, 0.02f);
    }
  }

  // random_codes: model.safetensors written tensor by tensor in `planned` order.
  void write_streamed(const std::string& path) {
    io::SafetensorsStreamWriter::Layout layout;
    for (const Planned& t : planned) layout.emplace_back(t.name, t.dtype, t.shape);
    io::SafetensorsStreamWriter out(path, layout);
    uint64_t state = o.seed * 0x9e3779b97f4a7c15ull + 1;
    auto next = [&state] {  // splitmix64: GBs of random bytes at memory speed
      uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return z ^ (z >> 31);
    };
    std::vector<uint8_t> buf;
    std::vector<float> chunk;
    for (Planned& t : planned) {
      if (t.fill == Fill::bytes) {
        out.write_tensor(t.name, t.bytes.data(), t.bytes.size());
        std::vector<uint8_t>().swap(t.bytes);
        continue;
      }
      const size_t numel = static_cast<size_t>(shape_numel(t.shape));
      buf.resize(numel * dtype_size(t.dtype));
      switch (t.fill) {
        case Fill::nvfp4_codes:
          for (size_t i = 0; i < buf.size(); i += 8) {
            const uint64_t r = next();
            std::memcpy(buf.data() + i, &r, std::min<size_t>(8, buf.size() - i));
          }
          break;
        case Fill::e4m3_scales:  // E4M3 0x30..0x3F: 0.5 .. 1.875
          for (uint8_t& b : buf) b = static_cast<uint8_t>(0x30 + (next() & 15));
          break;
        case Fill::fp8_codes:  // sign, exponent 4..8, any mantissa
          for (uint8_t& b : buf) {
            const uint64_t r = next();
            b = static_cast<uint8_t>((r & 0x80) | ((4 + (r >> 8) % 5) << 3) | ((r >> 16) & 7));
          }
          break;
        default: {  // uniform on [-sqrt(3), sqrt(3)] x stddev, in chunks of floats
          const float a = std::sqrt(3.0f) * t.stddev;
          constexpr size_t kChunk = size_t{1} << 16;
          chunk.resize(kChunk);
          for (size_t at = 0; at < numel; at += kChunk) {
            const size_t len = std::min(kChunk, numel - at);
            for (size_t j = 0; j < len; ++j)
              chunk[j] = a * (static_cast<float>(next() >> 40) * 0x1p-23f - 1.0f);  // 24 bits -> [-1, 1)
            from_f32_n(chunk.data(), t.dtype, buf.data() + at * dtype_size(t.dtype), len);
          }
        }
      }
      out.write_tensor(t.name, buf.data(), buf.size());
    }
    out.finish();
  }

  // gpt-oss's fused experts with their biases: MXFP4 blocks and scales (o.mxfp4_experts) or
  // input-major dense [E, in, out].
  void gpt_oss_experts(const LayerSpec& spec, QuantAlgo algo) {
    if (algo != QuantAlgo::None)
      fail("synthetic gpt-oss checkpoint: the experts are written unquantized or as MXFP4 (mxfp4_experts), not {}",
           quant::algo_name(algo));
    const std::string& box = spec.shards[0];
    const int64_t e_n = spec.num_experts, inter = spec.inter, hid = spec.hidden;
    auto param = [&](const std::string& name, int64_t out, int64_t in) {
      if (o.mxfp4_experts) {
        if (in % 32 != 0) fail("synthetic MXFP4 experts: input width {} is not a multiple of 32", in);
        std::vector<uint8_t> codes(static_cast<size_t>(e_n * out * in / 2)), scales(static_cast<size_t>(e_n * out * in / 32));
        for (uint8_t& b : codes) b = static_cast<uint8_t>(rng());
        // E2M1 codes average |x| ~ 2; the scale brings a row to about 1/sqrt(in).
        const int base = 127 - 1 - static_cast<int>(std::lround(std::log2(std::sqrt(static_cast<double>(in)))));
        for (uint8_t& b : scales) b = static_cast<uint8_t>(base - 1 + static_cast<int>(rng() % 3));
        st.add(on_disk(name + "_blocks"), DType::U8, {e_n, out, in / 32, 16}, std::move(codes));
        st.add(on_disk(name + "_scales"), DType::U8, {e_n, out, in / 32}, std::move(scales));
      } else {
        dense(name, {e_n, in, out}, randn(e_n * in * out, 1.0f / std::sqrt(static_cast<float>(in))));
      }
      dense(name + "_bias", {e_n, out}, randn(e_n * out, 0.02f));
    };
    param(box + ".gate_up_proj", 2 * inter, hid);
    param(box + ".down_proj", hid, inter);
  }

  // One fused group of HF modules sharing an input, quantized as `algo`.
  void linear_group(const std::vector<std::string>& modules, const std::vector<int64_t>& rows, int64_t k,
                    QuantAlgo algo, bool bias, float input_amax, bool awq = false) {
    if (o.random_codes) return random_linear_group(modules, rows, k, algo, bias);
    std::vector<std::vector<float>> ws;
    std::vector<float> pqs;
    // SmoothQuant writes a pre_quant_scale for every module, as AWQ does.
    if ((awq || algo == QuantAlgo::W8A8_SQ_PER_CHANNEL) && algo != QuantAlgo::None && algo != QuantAlgo::MIXED_PRECISION) {
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      pqs.resize(static_cast<size_t>(k));
      for (float& x : pqs) x = std::exp2(u(rng));
      std::vector<uint8_t> b(pqs.size() * dtype_size(o.dense_dtype));  // as stored: the dense dtype
      from_f32_n(pqs.data(), o.dense_dtype, b.data(), pqs.size());
      to_f32_n(b.data(), o.dense_dtype, pqs.data(), pqs.size());
    }
    float group_amax = 0;
    for (int64_t r : rows) {
      ws.push_back(randn(r * k, 1.0f / std::sqrt(static_cast<float>(k))));
      if (!pqs.empty())
        for (int64_t i = 0; i < r; ++i)
          for (int64_t j = 0; j < k; ++j) ws.back()[static_cast<size_t>(i * k + j)] /= pqs[static_cast<size_t>(j)];
      group_amax = std::max(group_amax, quant::amax(ws.back().data(), ws.back().size()));
    }
    for (size_t i = 0; i < modules.size(); ++i) {
      const std::string& m = modules[i];
      const int64_t n = rows[i];
      if (o.distinct_shard_scales)
        for (float& x : ws[i]) x *= 1.0f + 0.5f * static_cast<float>(i);
      switch (algo) {
        case QuantAlgo::None:
        case QuantAlgo::MIXED_PRECISION: dense(m + ".weight", {n, k}, ws[i]); break;
        case QuantAlgo::W4A8_MXFP4_FP8:
        case QuantAlgo::NVFP4_SVD:
          fail("synthetic checkpoint: {} is not written here (its fixture is ModelOpt's own export)",
               quant::algo_name(algo));
        case QuantAlgo::W4A16_AWQ:
          fail("synthetic checkpoint: W4A16_AWQ (int4) is not written here (tests/common/int4_checkpoint_writer.h)");
        case QuantAlgo::NVFP4:
        case QuantAlgo::NVFP4_AWQ:
        case QuantAlgo::W4A16_NVFP4: {
          auto q = o.distinct_shard_scales ? quant::quantize_weight(ws[i].data(), n, k)
                                           : quant::quantize_weight(ws[i].data(), n, k, group_amax);
          st.add(on_disk(m + ".weight"), DType::U8, {n, k / 2}, q.codes);
          st.add(on_disk(m + ".weight_scale"), DType::F8_E4M3, {n, k / 16}, q.scales);
          scalar(m + ".weight_scale_2", q.weight_scale_2);
          if (algo != QuantAlgo::W4A16_NVFP4) scalar(m + ".input_scale", input_amax / quant::kNvfp4GlobalDivisor);
          break;
        }
        case QuantAlgo::W4A8_NVFP4_FP8: {
          // ModelOpt's W4A8 rule (export/quant_utils.py; recipe numerics nvfp4_bs32):
          // weight_scale_2 = amax / 448, so the E4M3 block scales span up to 448/6, one per 32
          // weights (block amax / 6 / weight_scale_2), codes E2M1 of w / (scale × weight_scale_2).
          const float a = o.distinct_shard_scales ? quant::amax(ws[i].data(), ws[i].size()) : group_amax;
          const float s2 = a / 448.0f;
          std::vector<uint8_t> codes(static_cast<size_t>(n * k / 2)), scales(static_cast<size_t>(n * k / 32));
          for (int64_t r = 0; r < n; ++r)
            for (int64_t b = 0; b < k / 32; ++b) {
              const float* x = ws[i].data() + r * k + b * 32;
              const uint8_t sb = quant::weight_block_scale(quant::amax(x, 32), s2);
              scales[static_cast<size_t>(r * (k / 32) + b)] = sb;
              const float den = e4m3_to_f32(sb) * s2;
              for (int j = 0; j < 32; j += 2)
                codes[static_cast<size_t>((r * k + b * 32 + j) / 2)] =
                    static_cast<uint8_t>(f32_to_e2m1(x[j] / den) | (f32_to_e2m1(x[j + 1] / den) << 4));
            }
          st.add(on_disk(m + ".weight"), DType::U8, {n, k / 2}, codes);
          st.add(on_disk(m + ".weight_scale"), DType::F8_E4M3, {n, k / 32}, scales);
          scalar(m + ".weight_scale_2", s2);
          scalar(m + ".input_scale", input_amax / 448.0f);
          break;
        }
        case QuantAlgo::FP8_PER_CHANNEL_PER_TOKEN: {
          // ModelOpt's fp8_pc_pt export: weight_scale [n] = row amax / 448, no input_scale.
          std::vector<uint8_t> codes(ws[i].size());
          std::vector<float> scales(static_cast<size_t>(n));
          for (int64_t r = 0; r < n; ++r) {
            const float* row = ws[i].data() + r * k;
            scales[static_cast<size_t>(r)] = std::max(quant::amax(row, static_cast<size_t>(k)), 1e-12f) / 448.0f;
            for (int64_t j = 0; j < k; ++j)
              codes[static_cast<size_t>(r * k + j)] = f32_to_e4m3(row[j] / scales[static_cast<size_t>(r)]);
          }
          st.add(on_disk(m + ".weight"), DType::F8_E4M3, {n, k}, codes);
          st.add(on_disk(m + ".weight_scale"), DType::F32, {n}, scales.data(), scales.size() * sizeof(float));
          break;
        }
        case QuantAlgo::FP8_PB_WO: {
          // ModelOpt's fp8_pb_wo export: block amax / 448 per 128 x 128 block (partial at the
          // edges), the scale grid stored as the quantizer's amax shape [R, 1, C, 1].
          constexpr int64_t B = quant::kFp8PbWoBlock;
          const int64_t gr = (n + B - 1) / B, gc = (k + B - 1) / B;
          std::vector<float> scales(static_cast<size_t>(gr * gc));
          std::vector<uint8_t> codes(ws[i].size());
          for (int64_t br = 0; br < gr; ++br)
            for (int64_t bc = 0; bc < gc; ++bc) {
              float a = 0.0f;
              for (int64_t r = br * B; r < std::min(n, br * B + B); ++r)
                for (int64_t j = bc * B; j < std::min(k, bc * B + B); ++j)
                  a = std::max(a, std::fabs(ws[i][static_cast<size_t>(r * k + j)]));
              const float s = std::max(a, 1e-12f) / 448.0f;
              scales[static_cast<size_t>(br * gc + bc)] = s;
              for (int64_t r = br * B; r < std::min(n, br * B + B); ++r)
                for (int64_t j = bc * B; j < std::min(k, bc * B + B); ++j)
                  codes[static_cast<size_t>(r * k + j)] = f32_to_e4m3(ws[i][static_cast<size_t>(r * k + j)] / s);
            }
          st.add(on_disk(m + ".weight"), DType::F8_E4M3, {n, k}, codes);
          st.add(on_disk(m + ".weight_scale"), DType::F32, {gr, 1, gc, 1}, scales.data(),
                 scales.size() * sizeof(float));
          break;
        }
        case QuantAlgo::MXFP8: {
          // ModelOpt's MXFP8QTensor: E8M0 exponent ceil(log2(amax / 448)) per 32 weights of a row.
          std::vector<uint8_t> codes(ws[i].size()), scales(static_cast<size_t>(n * (k / 32)));
          for (int64_t r = 0; r < n; ++r)
            for (int64_t b = 0; b < k / 32; ++b) {
              const float* x = ws[i].data() + r * k + b * 32;
              const int e = quant::mxfp8_exponent(quant::amax(x, 32));
              scales[static_cast<size_t>(r * (k / 32) + b)] = static_cast<uint8_t>(e + 127);
              for (int j = 0; j < 32; ++j)
                codes[static_cast<size_t>(r * k + b * 32 + j)] =
                    f32_to_e4m3(std::clamp(x[j] * std::ldexp(1.0f, -e), -448.0f, 448.0f));
            }
          st.add(on_disk(m + ".weight"), DType::F8_E4M3, {n, k}, codes);
          st.add(on_disk(m + ".weight_scale"), DType::U8, {n, k / 32}, scales);
          break;
        }
        case QuantAlgo::W8A16:
        case QuantAlgo::W8A8_SQ_PER_CHANNEL: {
          // ModelOpt's int8 export: weight_scale [n] = row amax / 127, codes round half even
          // clamped to [-128, 127]; SmoothQuant adds a scalar input_scale = amax / 127.
          std::vector<uint8_t> codes(ws[i].size());
          std::vector<float> scales(static_cast<size_t>(n));
          for (int64_t r = 0; r < n; ++r) {
            const float* row = ws[i].data() + r * k;
            const float s = std::max(quant::amax(row, static_cast<size_t>(k)), 1e-12f) / 127.0f;
            scales[static_cast<size_t>(r)] = s;
            for (int64_t j = 0; j < k; ++j)
              codes[static_cast<size_t>(r * k + j)] =
                  static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(row[j] / s), -128.0f, 127.0f)));
          }
          st.add(on_disk(m + ".weight"), DType::I8, {n, k}, codes);
          st.add(on_disk(m + ".weight_scale"), DType::F32, {n}, scales.data(), scales.size() * sizeof(float));
          if (algo == QuantAlgo::W8A8_SQ_PER_CHANNEL) scalar(m + ".input_scale", input_amax / 127.0f);
          break;
        }
        case QuantAlgo::FP8: {
          float a = quant::amax(ws[i].data(), ws[i].size());
          float s = a / 448.0f;
          std::vector<uint8_t> codes(ws[i].size());
          for (size_t j = 0; j < codes.size(); ++j) codes[j] = f32_to_e4m3(ws[i][j] / s);
          st.add(on_disk(m + ".weight"), DType::F8_E4M3, {n, k}, codes);
          scalar(m + ".weight_scale", s);
          scalar(m + ".input_scale", input_amax / 448.0f);
          break;
        }
      }
      if (bias) dense(m + ".bias", {n}, randn(n, 0.02f));
      if (!pqs.empty()) dense(m + ".pre_quant_scale", {k}, pqs);
    }
  }
};

}  // namespace

namespace {
// A decoder layer's parameters that are not Linears: norm weights ones (zero-centered norms,
// which scale by 1 + w, store zeros), a gated delta-net's conv1d / A_log / dt_bias random.
void write_layer_params(Writer& w, const ModelConfig& mc, int64_t i) {
  auto ends = [](const std::string& s, const std::string& t) {
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  for (const LayerParam& p : mc.arch->layer_params(mc, i)) {
    const int64_t n = shape_numel(p.shape);
    if (ends(p.name, ".conv1d.weight")) w.dense(p.name, p.shape, w.randn(n, 0.4f));
    else if (ends(p.name, ".A_log") || ends(p.name, ".dt_bias")) w.dense(p.name, p.shape, w.randn(n, 0.5f));
    else if (ends(p.name, ".sinks") || ends(p.name, "embed_tokens_per_layer.weight"))
      w.dense(p.name, p.shape, w.randn(n, 1.0f));
    else if (ends(p.name, ".conv1d.bias")) w.dense(p.name, p.shape, w.randn(n, 0.1f));
    // A router's selection bias, stored in float32 as DeepSeek-style checkpoints do.
    else if (ends(p.name, ".e_score_correction_bias")) {
      w.put_f32(p.name, p.shape, w.randn(n, 0.2f));
    }
    else {
      const bool zc = mc.zero_centered_norm && !ends(p.name, "linear_attn.norm.weight");
      w.dense(p.name, p.shape, std::vector<float>(static_cast<size_t>(n), zc ? 0.0f : 1.0f));
    }
  }
}

// The MTP head of a gated hybrid (SyntheticOptions::mtp_head), unquantized: decoder layer
// num_layers's plan as a full-attention layer, written as mtp.layers.0.*, then fc and the norms.
void write_mtp_head(Writer& w, const ModelConfig& mc) {
  if (mc.gdn.full_attention.empty()) fail("synthetic checkpoint: an MTP head is written for the Qwen3.5 / Qwen3-Next hybrids only");
  ModelConfig c = mc;
  c.gdn.full_attention.push_back(true);
  const int64_t n = mc.num_layers, h = mc.hidden_size;
  w.mtp_layer = fmt::format("model.layers.{}.", n);
  std::vector<LayerSpec> specs;
  mc.arch->plan_layer(c, n, specs);
  for (const LayerSpec& spec : specs) {
    if (spec.kind == kernels::LayerKind::linear) {
      w.linear_group(spec.shards, spec.shard_rows, spec.in_features, QuantAlgo::None, spec.bias, 1.0f);
      continue;
    }
    for (int64_t e = 0; e < spec.num_experts; ++e) {
      const std::string b = fmt::format("{}.{}.", spec.shards[0], e);
      w.linear_group({b + spec.expert_proj[0], b + spec.expert_proj[1]}, {spec.inter, spec.inter}, spec.hidden,
                     QuantAlgo::None, false, 1.0f);
      w.linear_group({b + spec.expert_proj[2]}, {spec.hidden}, spec.inter, QuantAlgo::None, false, 1.0f);
    }
  }
  write_layer_params(w, c, n);
  w.dense("mtp.fc.weight", {h, 2 * h}, w.randn(2 * h * h, 1.0f / std::sqrt(static_cast<float>(2 * h))));
  for (const char* norm : {"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"})
    w.dense(norm, {h}, std::vector<float>(static_cast<size_t>(h), 0.0f));  // zero-centered
}
}  // namespace

void write_synthetic_checkpoint(const std::string& dir, const SyntheticOptions& o) {
  json config = synthetic_config_json(o);
  if (o.mtp_head) {
    if (o.extra_tensors) fail("synthetic checkpoint: mtp_head and extra_tensors both write mtp.*; choose one");
    (is_vl(o) ? config["text_config"] : config)["mtp_num_hidden_layers"] = 1;
  }
  if (o.random_codes && (o.extra_tensors || o.mxfp4_experts || o.fused_experts))
    fail("synthetic checkpoint: random_codes writes the plan's Linears and parameters only (not extra_tensors, "
         "mxfp4_experts or fused_experts)");
  ModelConfig mc = parse_model_config(config, "synthetic config.json");
  quant::ModeloptConfig qc;
  qc.algo = o.algo;
  qc.group_size = 16;
  qc.source_path = "synthetic";
  for (const auto& [m, a] : o.mixed) qc.quantized_layers[m] = {a, 16};
  std::vector<std::string> exclude = o.exclude;
  if (o.algo != QuantAlgo::None && o.algo != QuantAlgo::MIXED_PRECISION) {
    if (!o.quantize_lm_head) exclude.push_back("lm_head");
  }
  if (o.mtp_head && o.algo != QuantAlgo::None) exclude.push_back("*mtp*");  // as ModelOpt's Qwen3.5 recipes
  qc.exclude_modules = exclude;

  Writer w{o, {}, std::mt19937_64(o.seed)};
  if (is_vl(o)) w.prefix = "model.language_model.";
  // A wrapper of its own layout (Llama 4: language_model.model.*; lm_head.weight is read as is).
  if (const auto wrap = mc.arch->wrapper(); wrap && is_vl(o)) w.prefix = wrap->tensor_prefix + "model.";
  if (mc.tensor_prefix != "model.") w.prefix = mc.tensor_prefix;
  w.renames = mc.tensor_renames;
  w.random_dense("model.embed_tokens.weight", {mc.vocab_size, mc.hidden_size}, 1.0f);
  w.dense("model.norm.weight", {mc.hidden_size}, std::vector<float>(mc.hidden_size, mc.zero_centered_norm ? 0.0f : 1.0f));
  for (const LayerSpec& spec : plan_layers(mc)) {
    if (spec.tied_embedding) continue;
    // Routers are never quantized by exporters: list their modules as excluded, like ModelOpt
    // does (in_proj_b and in_proj_a by their own names).
    if (spec.router && o.algo != QuantAlgo::None && o.algo != QuantAlgo::MIXED_PRECISION)
      qc.exclude_modules.insert(qc.exclude_modules.end(), spec.shards.begin(), spec.shards.end());
    // A router is stored quantized only when MIXED_PRECISION lists it (some hybrid exports
    // quantize the GDN's in_proj_a / in_proj_b).
    auto mixed_router = [&] {
      auto it = o.mixed.find(spec.shards.front());
      return it == o.mixed.end() ? QuantAlgo::None : it->second;
    };
    QuantAlgo algo = spec.router ? mixed_router() : quant::algo_of(layer_on_disk_scheme(qc, spec));
    float input_amax = 3.0f + static_cast<float>(w.rng() % 1000) / 1000.0f;
    if (spec.kind == kernels::LayerKind::linear) {
      w.linear_group(spec.shards, spec.shard_rows, spec.in_features, algo, spec.bias, input_amax, o.pre_quant_scale);
      continue;
    }
    if (spec.expert_layout == LayerSpec::ExpertLayout::gpt_oss) {
      w.gpt_oss_experts(spec, algo);
      continue;
    }
    if (o.fused_experts && algo == QuantAlgo::None) {
      const int64_t e_n = spec.num_experts, inter = spec.inter, hid = spec.hidden;
      w.dense(spec.shards[0] + ".gate_up_proj", {e_n, 2 * inter, hid},
              w.randn(e_n * 2 * inter * hid, 1.0f / std::sqrt(static_cast<float>(hid))));
      w.dense(spec.shards[0] + ".down_proj", {e_n, hid, inter},
              w.randn(e_n * hid * inter, 1.0f / std::sqrt(static_cast<float>(inter))));
      continue;
    }
    for (int64_t e = 0; e < spec.num_experts; ++e) {
      std::string b = fmt::format("{}.{}.", spec.shards[0], e);
      w.linear_group({b + spec.expert_proj[0], b + spec.expert_proj[1]}, {spec.inter, spec.inter}, spec.hidden, algo,
                     false, input_amax);
      w.linear_group({b + spec.expert_proj[2]}, {spec.hidden}, spec.inter, algo, false, input_amax * 0.5f);
    }
  }
  // The other parameters of each decoder layer (write_layer_params).
  for (int64_t i = 0; i < mc.num_layers; ++i) write_layer_params(w, mc, i);
  if (o.mtp_head) write_mtp_head(w, mc);

  if (o.extra_tensors) {
    // Never read by the loader: a multi-token-prediction layer and, for VL, a vision block.
    const int64_t h = mc.hidden_size;
    w.dense("mtp.fc.weight", {h, 2 * h}, w.randn(2 * h * h, 0.1f));
    w.dense("mtp.norm.weight", {h}, std::vector<float>(static_cast<size_t>(h), 0.0f));
    w.dense("mtp.layers.0.mlp.experts.0.gate_proj.weight", {16, h}, w.randn(16 * h, 0.1f));
    if (is_vl(o)) w.st.add("model.visual.blocks.0.attn.qkv.weight", DType::F32, {48, 16}, w.randn(48 * 16, 0.1f));
  }

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec))
    fail("{}: cannot create the output directory: {}", dir, ec ? ec.message() : "a file of that name exists");
  auto write_json = [&](const std::string& name, const json& j) {
    std::ofstream out(std::filesystem::path(dir) / name);
    out << j.dump(2) << "\n";
    if (!out) fail("{}/{}: cannot write", dir, name);
  };
  if (o.algo != QuantAlgo::None) {
    json producer = {{"name", "fp4lm-synthetic"}, {"version", "0.1.0"}};
    json excl = json::array();
    for (const std::string& m : qc.exclude_modules) excl.push_back(w.on_disk(m));
    if (o.extra_tensors) {
      excl.push_back("mtp*");
      if (is_vl(o)) excl.push_back("model.visual*");
    }
    if (o.write_hf_quant_config) {
      json q = {{"quant_algo", std::string(quant::algo_name(o.algo))},
                {"kv_cache_quant_algo", nullptr},
                {"group_size", synthetic_group_size(o.algo)},
                {"exclude_modules", excl}};
      if (o.algo == QuantAlgo::MIXED_PRECISION) {
        json layers = json::object();
        for (const auto& [m, a] : o.mixed)
          layers[w.on_disk(m)] = {{"quant_algo", std::string(quant::algo_name(a))}, {"group_size", 16}};
        q["quantized_layers"] = layers;
      }
      if (o.pre_quant_scale) q["pre_quant_scale"] = true, q["has_zero_point"] = false;
      write_json("hf_quant_config.json", {{"producer", producer}, {"quantization", q}});
    }
    if (o.write_config_quantization) {
      json qcj = {{"quant_method", "modelopt"},
                  {"quant_algo", std::string(quant::algo_name(o.algo))},
                  {"group_size", synthetic_group_size(o.algo)},
                  {"ignore", excl},
                  {"producer", producer}};
      if (o.algo == QuantAlgo::MIXED_PRECISION) {
        json layers = json::object();
        for (const auto& [m, a] : o.mixed)
          layers[w.on_disk(m)] = {{"quant_algo", std::string(quant::algo_name(a))}, {"group_size", 16}};
        qcj["quantized_layers"] = layers;
      }
      config["quantization_config"] = qcj;
    }
  }
  if (o.mxfp4_experts) {
    if (o.algo != QuantAlgo::None) fail("synthetic checkpoint: mxfp4_experts needs algo None (the rest stays unquantized)");
    config["quantization_config"] = {{"quant_method", "mxfp4"},
                                     {"modules_to_not_convert",
                                      {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                       "lm_head"}}};
  }
  write_json("config.json", config);
  write_json("generation_config.json", {{"bos_token_id", 1}, {"eos_token_id", 2}});
  const std::string st_path = (std::filesystem::path(dir) / "model.safetensors").string();
  if (o.random_codes) w.write_streamed(st_path);
  else w.st.write(st_path);
}

}  // namespace fp4lm::synth
