// The attention variants' table (priority order), their needs, and the run-time choice.
// Kernels: cpu/reference/attention.cpp, cpu/avx2/attention.cpp, cpu/avx512/attention.cpp.
#include "kernels/attention.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>

#include "core/error.h"

namespace fp4lm::kernels {

namespace cpu {
void attention_reference(const AttentionCall& c, float* scratch);
#ifdef FP4LM_HAVE_AVX2_KERNELS
void attention_avx2(const AttentionCall& c, float* scratch);
#endif
#ifdef FP4LM_HAVE_AVX512_KERNELS
void attention_avx512(const AttentionCall& c, float* scratch);
#endif
}  // namespace cpu

namespace {

#ifdef FP4LM_HAVE_AVX512_KERNELS
constexpr auto kRunAvx512 = cpu::attention_avx512;
#else
constexpr void (*kRunAvx512)(const AttentionCall&, float*) = nullptr;
#endif
#ifdef FP4LM_HAVE_AVX2_KERNELS
constexpr auto kRunAvx2 = cpu::attention_avx2;
#else
constexpr void (*kRunAvx2)(const AttentionCall&, float*) = nullptr;
#endif

// The AVX-512 variant uses F/BW/VL only (no VBMI/VNNI/BF16 instructions); AVX2: AVX2, FMA, F16C.
constexpr AttentionKernel kAvx512{"avx512", {Isa::avx512, kAvx512Features}, kRunAvx512};
constexpr AttentionKernel kAvx2{"avx2", {Isa::avx2, kAvx2Features}, kRunAvx2};
constexpr AttentionKernel kReference{"reference", {Isa::portable, {}}, cpu::attention_reference};

const AttentionKernel& choose() {
  std::vector<std::string> names;
  for (const AttentionKernel* k : attention_kernels()) names.push_back(k->name);
  if (const char* want = std::getenv("FP4LM_ATTENTION_KERNEL"); want && *want) {
    const AttentionKernel* k = find_attention_kernel(want);
    if (!k) fail("FP4LM_ATTENTION_KERNEL={}: unknown attention kernel (variants: {})", want, fmt::join(names, ", "));
    if (std::string why = k->unavailable_reason(); !why.empty())
      fail("FP4LM_ATTENTION_KERNEL={}: unavailable: {}", want, why);
    return *k;
  }
  for (const AttentionKernel* k : attention_kernels())
    if (k->unavailable_reason().empty()) return *k;
  return kReference;
}

}  // namespace

std::vector<const AttentionKernel*> attention_kernels() { return {&kAvx512, &kAvx2, &kReference}; }

const AttentionKernel* find_attention_kernel(const std::string& name) {
  for (const AttentionKernel* k : attention_kernels())
    if (name == k->name) return k;
  return nullptr;
}

const AttentionKernel& attention_kernel() {
  static const AttentionKernel& k = choose();
  return k;
}

int64_t attention_scratch_floats(const AttentionCall& c) {
  const int64_t heads = c.group < kAttentionHeadBlock ? c.group : kAttentionHeadBlock;
  return heads * ((c.pos0 + c.rows + 15) / 16 * 16);
}

void run_attention(const AttentionKernel& k, const AttentionCall& c) {
  if (c.rows <= 0) return;
  if (c.head_dim <= 0 || c.group <= 0 || c.pos0 < 0)
    fail("attention: head_dim {}, group {}, pos0 {}: need head_dim > 0, group > 0, pos0 >= 0", c.head_dim, c.group,
         c.pos0);
  if (c.kv_dtype != DType::F32 && c.kv_dtype != DType::BF16 && c.kv_dtype != DType::F16 &&
      c.kv_dtype != DType::F8_E4M3)
    fail("attention: KV dtype {} (expected F32, BF16, F16 or F8_E4M3)", dtype_name(c.kv_dtype));
  if (!c.q || !c.out || !c.keys || !c.values) fail("attention: null q, out, keys or values");
  if (c.ring_rows < 0 || (c.ring_rows > 0 && (c.ring_first < 0 || c.ring_first >= c.ring_rows ||
                                              c.pos0 + c.rows > c.ring_rows)))
    fail("attention: ring of {} rows from row {} cannot hold positions [0, {})", c.ring_rows, c.ring_first,
         c.pos0 + c.rows);
  if (c.q_stride < c.group * c.head_dim || c.out_stride < c.group * c.head_dim)
    fail("attention: q stride {} / out stride {} below group × head_dim = {}", c.q_stride, c.out_stride,
         c.group * c.head_dim);
  // Availability is the caller's choice (attention_kernel() or a check of unavailable_reason):
  // checking it here would cost a string per call.
  if (!k.run) fail("attention kernel '{}' is unavailable: {}", k.name, k.unavailable_reason());
  thread_local std::vector<float> scratch;  // here, not in the ISA files (attention_schedule.h)
  scratch.resize(static_cast<size_t>(attention_scratch_floats(c)));
  k.run(c, scratch.data());
}

void attend_gathered(const AttentionKernel& k, const float* q, const float* keys, const float* values, int64_t n,
                     int64_t head_dim, float* out) {
  if (n <= 0) fail("attention: no gathered rows to attend over");
  AttentionCall call;
  call.q = q;
  call.q_stride = head_dim;
  call.out = out;
  call.out_stride = head_dim;
  call.rows = 1;
  call.pos0 = n - 1;  // the one query sees all n rows
  call.group = 1;
  call.head_dim = head_dim;
  call.kv_dtype = DType::F32;
  call.keys = reinterpret_cast<const uint8_t*>(keys);
  call.values = reinterpret_cast<const uint8_t*>(values);
  run_attention(k, call);
}

}  // namespace fp4lm::kernels
