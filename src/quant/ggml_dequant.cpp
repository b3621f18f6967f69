// ggml block formats to float32 (quant/ggml_dequant.h). Scales are read through memcpy: a GGUF
// block has no alignment promise beyond the tensor's start.
#include "quant/ggml_dequant.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "io/gguf.h"

namespace fp4lm::quant {
namespace {

using io::GgmlType;

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void q8_0(const uint8_t* src, float* dst, uint64_t blocks) {
  for (uint64_t b = 0; b < blocks; ++b, src += 34, dst += 32) {
    const float d = f16_at(src);
    for (int j = 0; j < 32; ++j) dst[j] = d * static_cast<float>(static_cast<int8_t>(src[2 + j]));
  }
}

void q4_0(const uint8_t* src, float* dst, uint64_t blocks) {
  for (uint64_t b = 0; b < blocks; ++b, src += 18, dst += 32) {
    const float d = f16_at(src);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>((src[2 + j] & 0x0F) - 8);
      dst[j + 16] = d * static_cast<float>((src[2 + j] >> 4) - 8);
    }
  }
}

void q4_1(const uint8_t* src, float* dst, uint64_t blocks) {
  for (uint64_t b = 0; b < blocks; ++b, src += 20, dst += 32) {
    const float d = f16_at(src), m = f16_at(src + 2);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>(src[4 + j] & 0x0F) + m;
      dst[j + 16] = d * static_cast<float>(src[4 + j] >> 4) + m;
    }
  }
}

}  // namespace

bool ggml_can_dequantize(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
    case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::Q4_1:
      return true;
    default:
      return false;
  }
}

void ggml_dequantize(uint32_t type, const uint8_t* src, float* dst, uint64_t numel) {
  const io::GgmlTypeInfo* info = io::ggml_type_info(type);
  if (!info || !ggml_can_dequantize(type))
    fail("ggml type {} ({}) cannot be dequantized (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)",
         info ? info->name : "unknown", type);
  if (numel % info->block_elems != 0)
    fail("ggml type {}: {} elements is not a whole number of {}-element blocks", info->name, numel, info->block_elems);
  const uint64_t blocks = numel / info->block_elems;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: std::memcpy(dst, src, numel * 4); return;
    case GgmlType::F16:
    case GgmlType::BF16:
      for (uint64_t i = 0; i < numel; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = static_cast<GgmlType>(type) == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    case GgmlType::Q8_0: q8_0(src, dst, blocks); return;
    case GgmlType::Q4_0: q4_0(src, dst, blocks); return;
    case GgmlType::Q4_1: q4_1(src, dst, blocks); return;
    default: break;
  }
}

}  // namespace fp4lm::quant
