#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/cpu_features.h"
#include "core/error.h"

namespace fp4lm {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr DTypeInfo kInfo[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},   {DType::I8, "I8", 1},
    {DType::U16, "U16", 2},   {DType::I16, "I16", 2}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::U32, "U32", 4}, {DType::I32, "I32", 4},
    {DType::F32, "F32", 4},   {DType::U64, "U64", 8}, {DType::I64, "I64", 8},
    {DType::F64, "F64", 8},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};
}  // namespace

size_t dtype_size(DType t) { return kInfo[static_cast<size_t>(t)].size; }
std::string_view dtype_name(DType t) { return kInfo[static_cast<size_t>(t)].name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  return std::nullopt;
}

std::string_view dtype_torch_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::F64: return "float64";
    case DType::F8_E4M3: return "float8_e4m3fn";
    case DType::F8_E5M2: return "float8_e5m2";
    default: return dtype_name(t);
  }
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    // inf / NaN: payload kept, and a signalling NaN comes out quiet, as F16C's vcvtph2ps does,
    // so the scalar and bulk paths agree bit for bit.
    u = sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u);
  } else if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: value = man * 2^-24, exact in float32
      float v = static_cast<float>(man) * 0x1p-24f;
      return sign ? -v : v;
    }
  } else {
    u = sign | ((exp + 112) << 23) | (man << 13);
  }
  return std::bit_cast<float>(u);
}

uint16_t f32_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {
    // Result is subnormal or zero: value / 2^-24 rounded to nearest even.
    float v = std::bit_cast<float>(a) * 0x1p24f;  // exact scaling
    float r = std::nearbyint(v);                  // default rounding mode: ties to even
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
  }
  // Normal: rebias exponent, round mantissa from 23 to 10 bits, ties to even.
  uint32_t r = a - 0x38000000u;  // exponent bias 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

// dtype_f16c.cpp: built for x86 targets only (CMakeLists.txt), called when the CPU has F16C.
#ifdef FP4LM_HAVE_F16C_CONVERSIONS
void f16_to_f32_n_f16c(const uint16_t* src, float* dst, size_t n);
void f32_to_f16_n_f16c(const float* src, uint16_t* dst, size_t n);
#endif

void f16_to_f32_n(const uint16_t* src, float* dst, size_t n) {
#ifdef FP4LM_HAVE_F16C_CONVERSIONS
  if (cpu_features().has(CpuFeature::f16c)) return f16_to_f32_n_f16c(src, dst, n);
#endif
  for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_n(const float* src, uint16_t* dst, size_t n) {
#ifdef FP4LM_HAVE_F16C_CONVERSIONS
  if (cpu_features().has(CpuFeature::f16c)) return f32_to_f16_n_f16c(src, dst, n);
#endif
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void bf16_to_f32_n(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void f32_to_bf16_n(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void to_f32_n(const void* src, DType t, float* dst, size_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, n * sizeof(float)); return;
    case DType::BF16: return bf16_to_f32_n(static_cast<const uint16_t*>(src), dst, n);
    case DType::F16: return f16_to_f32_n(static_cast<const uint16_t*>(src), dst, n);
    default: fail("activation dtype must be F32, BF16 or F16, found {}", dtype_name(t));
  }
}

void from_f32_n(const float* src, DType t, void* dst, size_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, n * sizeof(float)); return;
    case DType::BF16: return f32_to_bf16_n(src, static_cast<uint16_t*>(dst), n);
    case DType::F16: return f32_to_f16_n(src, static_cast<uint16_t*>(dst), n);
    default: fail("activation dtype must be F32, BF16 or F16, found {}", dtype_name(t));
  }
}

float e4m3_to_f32(uint8_t code) {
  uint32_t exp = (code >> 3) & 0xf;
  uint32_t man = code & 7;
  float v;
  if (exp == 0xf && man == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = static_cast<float>(man) * 0x1p-9f;  // subnormal: man/8 * 2^-6
  } else {
    v = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, static_cast<int>(exp) - 7);
  }
  return (code & 0x80) ? -v : v;
}

uint8_t f32_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.0f) return static_cast<uint8_t>(sign | 0x7e);  // saturate (incl. inf)
  if (a < 0x1p-6f) {
    // Subnormal range: steps of 2^-9, round to nearest even on the step count.
    float steps = std::nearbyint(a * 0x1p9f);  // exact scaling, ties to even
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(steps));  // 8 steps = 0x08 = 2^-6
  }
  // Normal: keep 3 mantissa bits of the float32, ties to even on the dropped 20 bits.
  uint32_t u = std::bit_cast<uint32_t>(a);
  u += 0x7ffffu + ((u >> 20) & 1u);
  int exp = static_cast<int>(u >> 23) - 127 + 7;
  uint32_t man = (u >> 20) & 7u;
  if (exp > 15 || (exp == 15 && man == 7)) return static_cast<uint8_t>(sign | 0x7e);
  return static_cast<uint8_t>(sign | (exp << 3) | man);
}

}  // namespace fp4lm
