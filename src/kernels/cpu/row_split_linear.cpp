#include "kernels/cpu/row_split_linear.h"

#include <algorithm>

#include "core/error.h"

namespace fp4lm::kernels::cpu {

void RowSplitLinear::forward(const void* x, int64_t m, void* y, ThreadPool& pool) const {
  if (m < 0) fail("CPU Linear kernel: negative token count {}", m);
  if (m == 0) return;
  const std::unique_ptr<PreparedInput> in = prepare(x, m, a16_for(m), pool);
  const int64_t rb = row_block(m), blocks = (n_ + rb - 1) / rb;
  pool.parallel_for(blocks, [&](int64_t b0, int64_t b1, int) {
    run_rows(*in, b0 * rb, std::min(n_, b1 * rb), y);
  });
}

}  // namespace fp4lm::kernels::cpu
