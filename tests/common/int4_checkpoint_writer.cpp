#include "common/int4_checkpoint_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/checkpoint_edit.h"
#include "core/dtype.h"

namespace fp4lm::test {

namespace {

bool is_quantized_linear(const std::string& name) {
  for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    if (name.size() > 7 && name.ends_with(std::string(p) + ".weight") && name.starts_with("model.layers.")) return true;
  return false;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

float round_to(float v, DType t) {
  if (t == DType::F32) return v;
  uint16_t h;
  from_f32_n(&v, t, &h, 1);
  float out;
  to_f32_n(&h, t, &out, 1);
  return out;
}

// One weight quantized: codes [n][k] (0..15), zeros [n][groups] (0..15), scales [n][groups]
// (rounded to the stored dtype), g_idx [k], and the dequantized values.
struct Quantized {
  std::vector<int> codes, zeros;
  std::vector<float> scales, deq;
  std::vector<int32_t> g_idx;
};

Quantized quantize(const float* w, int64_t n, int64_t k, const Int4WriteOptions& o, DType scale_dtype, std::mt19937& rng) {
  const int64_t group = o.group ? o.group : k, groups = k / group;
  Quantized q;
  q.g_idx.resize(static_cast<size_t>(k));
  std::vector<int32_t> order(static_cast<size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  if (o.act_order) std::shuffle(order.begin(), order.end(), rng);
  for (int64_t i = 0; i < k; ++i) q.g_idx[static_cast<size_t>(order[i])] = static_cast<int32_t>(i / group);
  q.codes.resize(static_cast<size_t>(n * k));
  q.deq.resize(static_cast<size_t>(n * k));
  q.zeros.resize(static_cast<size_t>(n * groups));
  q.scales.resize(static_cast<size_t>(n * groups));
  // GPTQ v1 cannot store zero point 0 (it writes zero - 1); its asymmetric zero points stay >= 1.
  const int min_zero = o.producer == Int4Producer::gptq && o.gptq_v1 ? 1 : 0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      float lo = 0, hi = 0, amax = 0;
      for (int64_t j = 0; j < k; ++j)
        if (q.g_idx[j] == g) {
          const float v = w[r * k + j];
          lo = std::min(lo, v), hi = std::max(hi, v), amax = std::max(amax, std::fabs(v));
        }
      float scale;
      int zero;
      if (o.symmetric) {
        scale = round_to(std::max(amax, 1e-6f) / 7.5f, scale_dtype);
        zero = 8;
      } else {
        scale = round_to(std::max(hi - lo, 1e-6f) / 15.0f, scale_dtype);
        zero = std::clamp(static_cast<int>(std::lround(-lo / scale)), min_zero, 15);
      }
      q.scales[r * groups + g] = scale;
      q.zeros[r * groups + g] = zero;
      for (int64_t j = 0; j < k; ++j)
        if (q.g_idx[j] == g) {
          const int c = std::clamp(static_cast<int>(std::lround(w[r * k + j] / scale)) + zero, 0, 15);
          q.codes[r * k + j] = c;
          q.deq[r * k + j] = static_cast<float>(c - zero) * scale;
        }
    }
  return q;
}

std::vector<uint8_t> narrow(const std::vector<float>& v, DType t) {
  std::vector<uint8_t> b(v.size() * 2);
  from_f32_n(v.data(), t, b.data(), v.size());
  return b;
}

void set_quantization_config(const std::filesystem::path& dir, const nlohmann::json& qc) {
  nlohmann::json c;
  {
    std::ifstream in(dir / "config.json");
    c = nlohmann::json::parse(in);
  }
  c["quantization_config"] = qc;
  std::ofstream(dir / "config.json") << c.dump(2);
}

}  // namespace

void write_int4_pair(const std::filesystem::path& dense_dir, const std::filesystem::path& deq_dir,
                     const std::filesystem::path& int4_dir, const Int4WriteOptions& o) {
  copy_dir(dense_dir, deq_dir);
  copy_dir(dense_dir, int4_dir);
  std::mt19937 rng(o.seed);
  const DType sdt = o.producer == Int4Producer::compressed_tensors ? DType::BF16
                    : o.producer == Int4Producer::modelopt         ? DType::F32
                                                                   : DType::F16;
  std::vector<EditedTensor> extra;
  std::vector<std::pair<std::string, std::vector<float>>> deq;
  edit_tensors(int4_dir, [&](EditedTensor& t) {
    if (!is_quantized_linear(t.name)) return true;
    if (t.shape.size() != 2 || (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F16))
      throw std::runtime_error("dense float weights expected: " + t.name);
    const int64_t n = t.shape[0], k = t.shape[1], groups = k / (o.group ? o.group : k);
    std::vector<float> w(static_cast<size_t>(n * k));
    to_f32_n(t.bytes.data(), t.dtype, w.data(), w.size());
    const std::string m = t.name.substr(0, t.name.size() - 7);
    std::vector<float> pqs;
    if (o.pre_quant_scale) {
      // One scale per input, shared by the shards that read it: 2^u, u in {-0.5, ..., 0.5}.
      const bool qkv = m.ends_with("q_proj") || m.ends_with("k_proj") || m.ends_with("v_proj");
      const bool gu = m.ends_with("gate_proj") || m.ends_with("up_proj");
      const size_t salt = std::hash<std::string>{}(m.substr(0, m.rfind('.')) + (qkv ? "qkv" : gu ? "gu" : m));
      for (int64_t j = 0; j < k; ++j)
        pqs.push_back(std::exp2(static_cast<float>((static_cast<size_t>(j) * 7 + salt) % 5) * 0.25f - 0.5f));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < k; ++j) w[r * k + j] /= pqs[j];
      extra.push_back({m + ".pre_quant_scale", DType::F32, {k}, bytes_of(pqs)});
    }
    Quantized q = quantize(w.data(), n, k, o, sdt, rng);
    std::vector<float> deq_w = q.deq;
    if (!pqs.empty())
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < k; ++j) deq_w[r * k + j] *= pqs[j];
    deq.emplace_back(t.name, deq_w);
    std::vector<float> s = q.scales;  // [n][groups]
    if (o.producer == Int4Producer::gptq) {
      std::vector<int32_t> qw(static_cast<size_t>(k / 8 * n), 0), qz(static_cast<size_t>(groups * n / 8), 0);
      for (int64_t i = 0; i < k / 8; ++i)
        for (int64_t r = 0; r < n; ++r)
          for (int t8 = 0; t8 < 8; ++t8)
            qw[i * n + r] |= static_cast<int32_t>(static_cast<uint32_t>(q.codes[r * k + 8 * i + t8]) << (4 * t8));
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t c = 0; c < n / 8; ++c)
          for (int t8 = 0; t8 < 8; ++t8) {
            const int z = (q.zeros[(8 * c + t8) * groups + g] - (o.gptq_v1 ? 1 : 0)) & 15;
            qz[g * (n / 8) + c] |= static_cast<int32_t>(static_cast<uint32_t>(z) << (4 * t8));
          }
      std::vector<float> st(static_cast<size_t>(groups * n));  // [groups][n]
      for (int64_t r = 0; r < n; ++r)
        for (int64_t g = 0; g < groups; ++g) st[g * n + r] = s[r * groups + g];
      extra.push_back({m + ".qweight", DType::I32, {k / 8, n}, bytes_of(qw)});
      extra.push_back({m + ".qzeros", DType::I32, {groups, n / 8}, bytes_of(qz)});
      extra.push_back({m + ".scales", DType::F16, {groups, n}, narrow(st, DType::F16)});
      if (o.write_g_idx || o.act_order) extra.push_back({m + ".g_idx", DType::I32, {k}, bytes_of(q.g_idx)});
    } else if (o.producer == Int4Producer::modelopt) {
      std::vector<uint8_t> packed(static_cast<size_t>(n / 2 * k));
      for (int64_t i = 0; i < n / 2; ++i)
        for (int64_t j = 0; j < k; ++j) {
          const int q0 = q.codes[(2 * i) * k + j] - q.zeros[(2 * i) * groups + j / (k / groups)];
          const int q1 = q.codes[(2 * i + 1) * k + j] - q.zeros[(2 * i + 1) * groups + j / (k / groups)];
          packed[i * k + j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
        }
      extra.push_back({m + ".weight", DType::U8, {n / 2, k}, std::move(packed)});
      extra.push_back({m + ".weight_scale", DType::F32, {n, groups}, bytes_of(s)});
    } else if (o.producer == Int4Producer::awq) {
      constexpr int kOrderMap[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // AutoAWQ's WQLinear_GEMM.from_linear
      std::vector<int32_t> qw(static_cast<size_t>(k * n / 8), 0), qz(static_cast<size_t>(groups * n / 8), 0);
      for (int64_t j = 0; j < k; ++j)
        for (int64_t c = 0; c < n / 8; ++c)
          for (int i = 0; i < 8; ++i)
            qw[j * (n / 8) + c] |=
                static_cast<int32_t>(static_cast<uint32_t>(q.codes[(8 * c + kOrderMap[i]) * k + j]) << (4 * i));
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t c = 0; c < n / 8; ++c)
          for (int i = 0; i < 8; ++i)
            qz[g * (n / 8) + c] |=
                static_cast<int32_t>(static_cast<uint32_t>(q.zeros[(8 * c + kOrderMap[i]) * groups + g]) << (4 * i));
      std::vector<float> st(static_cast<size_t>(groups * n));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t g = 0; g < groups; ++g) st[g * n + r] = s[r * groups + g];
      extra.push_back({m + ".qweight", DType::I32, {k, n / 8}, bytes_of(qw)});
      extra.push_back({m + ".qzeros", DType::I32, {groups, n / 8}, bytes_of(qz)});
      extra.push_back({m + ".scales", DType::F16, {groups, n}, narrow(st, DType::F16)});
    } else {
      std::vector<int32_t> wp(static_cast<size_t>(n * k / 8), 0);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < k; ++j)
          wp[r * (k / 8) + j / 8] |= static_cast<int32_t>(static_cast<uint32_t>(q.codes[r * k + j]) << (4 * (j % 8)));
      extra.push_back({m + ".weight_packed", DType::I32, {n, k / 8}, bytes_of(wp)});
      extra.push_back({m + ".weight_scale", DType::BF16, {n, groups}, narrow(s, DType::BF16)});
      extra.push_back({m + ".weight_shape", DType::I64, {2}, bytes_of(std::vector<int64_t>{n, k})});
      if (!o.symmetric) {
        std::vector<int32_t> zp(static_cast<size_t>(n / 8 * groups), 0);
        for (int64_t c = 0; c < n / 8; ++c)
          for (int64_t g = 0; g < groups; ++g)
            for (int t8 = 0; t8 < 8; ++t8)
              zp[c * groups + g] |= static_cast<int32_t>(static_cast<uint32_t>(q.zeros[(8 * c + t8) * groups + g]) << (4 * t8));
        extra.push_back({m + ".weight_zero_point", DType::I32, {n / 8, groups}, bytes_of(zp)});
      }
      if (o.act_order) extra.push_back({m + ".weight_g_idx", DType::I32, {k}, bytes_of(q.g_idx)});
    }
    return false;
  }, extra);
  // extra is filled while the edit runs, after edit_tensors took its copy: write it now.
  edit_tensors(int4_dir, [](EditedTensor&) { return true; }, std::move(extra));
  edit_tensors(deq_dir, [&](EditedTensor& t) {
    for (const auto& [name, v] : deq)
      if (name == t.name) {  // the dequantized weights in float32, whatever the dense dtype was
        t.dtype = DType::F32;
        t.bytes = bytes_of(v);
      }
    return true;
  });
  set_quantization_config(int4_dir, o.quantization_config);
}

}  // namespace fp4lm::test
