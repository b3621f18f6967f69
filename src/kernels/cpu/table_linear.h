#pragma once
// The ISA-neutral Linear kernel of the CPU backends whose weights are one prepared matrix and
// whose arithmetic is one instruction set's table of functions (the ISA seam): the dense
// backends (DenseMatrix) and the FP8 W8A16 backends (Fp8Matrix). The backend's registration
// chooses the table; the kernel calls the ISA only through it.
#include <cstdint>
#include <memory>
#include <string_view>

#include "core/error.h"
#include "kernels/cpu/row_split_linear.h"

namespace fp4lm::kernels::cpu {

template <class Matrix>
struct KernelTable {
  const char* isa = "";  // "avx2", "avx512"
  // x [m, k] in `act` -> the call's activations in the kernel's layout.
  std::unique_ptr<PreparedInput> (*input)(const void* x, DType act, int64_t m, int64_t k) = nullptr;
  // Rows per unit of parallel work for m tokens (a multiple of every row tile).
  int64_t (*row_block)(int64_t m, int64_t k) = nullptr;
  // y[m, n] = x · Wᵀ (+ bias) for output rows [r0, r1) only, on the calling thread.
  void (*rows)(const Matrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y, DType act) = nullptr;
};

template <class Matrix>
class TableLinear final : public RowSplitLinear {
 public:
  // Throws Error (starting with `what`, e.g. "FP8 CPU kernel") on inconsistent weights, an
  // unsupported activation dtype or a table that was not built. `isa` must outlive the kernel
  // (the tables are static).
  TableLinear(LinearWeights w, const LinearProblem& p, const KernelTable<Matrix>& isa,
              Matrix (*prepare)(LinearWeights), std::string_view what)
      : RowSplitLinear(w.n), w_(prepare(std::move(w))), act_(p.act_dtype), isa_(isa), what_(what) {
    if (act_ != DType::F32 && act_ != DType::BF16 && act_ != DType::F16)
      fail("{}: activation dtype {} is not float32, bfloat16 or float16", what_, dtype_torch_name(act_));
    if (!isa_.rows) fail("{}: the {} kernels were not built", what_, isa_.isa);
    if (p.n != w_.n || p.k != w_.k)
      fail("{}: problem shape [{}, {}] differs from the weights' [{}, {}]", what_, p.n, p.k, w_.n, w_.k);
  }

  int64_t row_block(int64_t m) const override { return isa_.row_block(m, w_.k); }
  std::unique_ptr<PreparedInput> prepare(const void* x, int64_t m, bool, ThreadPool&) const override {
    if (m < 0) fail("{}: negative token count {}", what_, m);
    return isa_.input(x, act_, m, w_.k);
  }
  void run_rows(const PreparedInput& in, int64_t r0, int64_t r1, void* y) const override {
    isa_.rows(w_, in, r0, r1, y, act_);
  }
  size_t weight_bytes() const override { return w_.weight_bytes; }

 private:
  Matrix w_;
  DType act_;
  const KernelTable<Matrix>& isa_;
  std::string_view what_;
};

}  // namespace fp4lm::kernels::cpu
