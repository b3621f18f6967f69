#pragma once
// A CPU Linear kernel whose work splits into output-row ranges: the call's activations are
// prepared once (converted, permuted or quantized), then any row range can run on any thread.
// forward() splits the rows over the pool; the grouped MoE instead puts the row blocks of all
// active experts into one parallel loop (decode: top-k small GEMVs at once).
// Every (row, token) result is computed by one fixed sequence of operations, so outputs never
// depend on the split, the thread count or the other tokens of the call.
#include <cstdint>
#include <memory>

#include "kernels/backend.h"

namespace fp4lm::kernels::cpu {

// A call's activations in the form one kernel consumes.
struct PreparedInput {
  virtual ~PreparedInput() = default;
  int64_t m = 0;
};

class RowSplitLinear : public LinearKernel {
 public:
  int64_t rows() const { return n_; }
  // Rows per unit of work for a call of m tokens (a multiple of the kernel's row tile).
  virtual int64_t row_block(int64_t m) const = 0;
  // force_a16: an NVFP4 W4A4 layer runs its W4A16 kernel for this call (ignored elsewhere).
  // x [m, k] in the act dtype. May use the pool (callers inside a pool job run it inline).
  virtual std::unique_ptr<PreparedInput> prepare(const void* x, int64_t m, bool force_a16,
                                                 ThreadPool& pool) const = 0;
  // y rows [r0, r1) of every token (y [m, n] in the act dtype), on the calling thread.
  virtual void run_rows(const PreparedInput& in, int64_t r0, int64_t r1, void* y) const = 0;

  // The layer's own choice of kernel for m tokens (W4A4 layers: W4A16 when m <= a16_max_tokens,
  // or as the calling thread's kernels::A16Scope forces it).
  virtual bool a16_for(int64_t m) const { (void)m; return false; }

  void forward(const void* x, int64_t m, void* y, ThreadPool& pool) const override;

 protected:
  explicit RowSplitLinear(int64_t n) : n_(n) {}
  int64_t n_;
};

}  // namespace fp4lm::kernels::cpu
