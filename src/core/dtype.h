#pragma once
// Element types of checkpoints and activations, and the scalar conversions between them.
// Every conversion is exact to its rule (round-to-nearest-even, saturation, NaN handling);
// tests check them exhaustively where the domain is small (tests/core/dtype_test.cpp).
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fp4lm {

// The safetensors dtypes, by their on-disk names.
enum class DType : uint8_t {
  BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64, F8_E4M3, F8_E5M2
};

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "BF16", "F8_E4M3", ...
std::optional<DType> parse_dtype(std::string_view name);
// torch-style name used in config.json and on the CLI: "float32", "bfloat16", "float16".
std::string_view dtype_torch_name(DType t);

// ---- bf16: the top 16 bits of an IEEE float32 ----
inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

// ---- fp16 (IEEE binary16), scalar; bulk versions below use F16C when the CPU has it ----
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
void f16_to_f32_n(const uint16_t* src, float* dst, size_t n);
void f32_to_f16_n(const float* src, uint16_t* dst, size_t n);
void bf16_to_f32_n(const uint16_t* src, float* dst, size_t n);
void f32_to_bf16_n(const float* src, uint16_t* dst, size_t n);
// Activation buffers: `t` is F32, BF16 or F16 (anything else throws Error).
void to_f32_n(const void* src, DType t, float* dst, size_t n);
void from_f32_n(const float* src, DType t, void* dst, size_t n);

// ---- FP8 E4M3FN: bias 7, max 448, no infinities, 0x7F/0xFF are NaN ----
float e4m3_to_f32(uint8_t code);
// Round to nearest even; finite values beyond ±448 saturate to ±448; NaN -> 0x7F; ±inf -> ±448.
uint8_t f32_to_e4m3(float f);

// ---- FP4 E2M1: bit 3 sign, low bits index {0, 0.5, 1, 1.5, 2, 3, 4, 6} ----
inline constexpr float kE2M1Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
inline float e2m1_to_f32(uint8_t code) {
  float v = kE2M1Values[code & 7];
  return (code & 8) ? -v : v;
}
// ModelOpt's thresholds on |y| (docs/FORMAT.md): <=0.25->0, <0.75->0.5, <=1.25->1, <1.75->1.5,
// <=2.5->2, <3.5->3, <=5->4, else 6. Sign bit set when y < 0 (so -0.1 encodes as 0x8).
inline uint8_t f32_to_e2m1(float y) {
  float a = y < 0 ? -y : y;
  uint8_t m = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3
            : a <= 2.5f ? 4 : a < 3.5f ? 5 : a <= 5.0f ? 6 : 7;
  return static_cast<uint8_t>(m | (y < 0 ? 8 : 0));
}

}  // namespace fp4lm
