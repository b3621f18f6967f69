#pragma once
// The prepared form of an unquantized layer for the CPU dense kernels: the checkpoint's own
// F32/BF16/F16 rows used in place (no copy, no conversion at load). Fused shards may differ in
// dtype, so the matrix is a list of segments, each a run of rows in one dtype.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "kernels/weights.h"

namespace fp4lm::kernels::cpu {

struct DenseSegment {
  int64_t row0 = 0, rows = 0;  // output rows [row0, row0 + rows)
  DType dtype = DType::F32;    // F32, BF16 or F16
  const uint8_t* data = nullptr;  // [rows, k] row-major
};

struct DenseMatrix {
  int64_t n = 0, k = 0;
  std::vector<DenseSegment> segments;
  std::vector<float> bias;  // [n] or empty
  size_t weight_bytes = 0;
  std::shared_ptr<const void> keepalive;
};

// Throws fp4lm::Error naming the shard on a missing pointer, an unsupported dtype, rows not
// summing to n, or a bias of the wrong length.
DenseMatrix prepare_dense_matrix(LinearWeights w);

}  // namespace fp4lm::kernels::cpu
