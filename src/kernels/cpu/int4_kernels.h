#pragma once
// The int4 W4A16 kernels of one instruction set as a table (the ISA seam), and the ISA-neutral
// Linear kernel of the int4 backends that calls them (int4_linear.cpp). The row kernels are declared
// in int4_matrix.h (avx2/int4_w4a16.cpp), the repacked layout's in int4_packed.h.
#include <string_view>

#include "kernels/cpu/int4_matrix.h"
#include "kernels/cpu/int4_packed.h"
#include "kernels/cpu/row_split_linear.h"

namespace fp4lm::kernels::cpu {

struct Int4Kernels {
  const char* isa = "";  // "avx2", "avx512"
  // The repacked layout's kernels (int4_packed.h): 256 the AVX-512 BF16 kernel (any group), 64 the
  // AVX2 integer kernel (groups that are multiples of 32); 0: not built.
  int64_t packed_chunk = 0;
  // The Int4Rows kernels for what the repacked kernel cannot run (AVX2: groups 16, 48, ...; none
  // on AVX-512, which takes every group).
  int64_t (*row_block)(int64_t m, int64_t k) = nullptr;
  void (*rows)(const Int4Rows& w, const float* x, int64_t m, int64_t r0, int64_t r1, void* y, DType act) = nullptr;
};

// Call a table's functions only when its backend's unavailable_reason() is "" (the AVX-512 table
// is empty when the compiler could not build its kernels).
const Int4Kernels& int4_kernels_avx2();
const Int4Kernels& int4_kernels_avx512();

// The Linear kernel: the call's x converted to fp32 and gathered by the act-order permutation once
// (prepare), then row ranges on any thread; activations are never quantized.
class Int4Linear final : public RowSplitLinear {
 public:
  // Throws Error on inconsistent weights (prepare_int4_matrix), an unsupported activation dtype or
  // a table that was not built. `isa` must outlive the kernel (the tables are static).
  Int4Linear(LinearWeights w, const LinearProblem& p, const Int4Kernels& isa);
  int64_t row_block(int64_t m) const override;
  std::unique_ptr<PreparedInput> prepare(const void* x, int64_t m, bool, ThreadPool&) const override;
  void run_rows(const PreparedInput& in, int64_t r0, int64_t r1, void* y) const override;
  size_t weight_bytes() const override { return packed_chunk_ ? packed_.bytes() : w_.weight_bytes; }

 private:
  Int4Matrix w_;
  DType act_;
  const Int4Kernels& isa_;
  int64_t packed_chunk_ = 0;  // 0: the Int4Rows kernels; else packed_ and its ISA's kernel
  Int4Packed packed_;
  bool native_bf16_ = false;
};

}  // namespace fp4lm::kernels::cpu
