#pragma once
// The machine's sustained read bandwidth: the baseline that `fp4lm bench kernels` and
// bench/decode_bench divide kernel and decode figures by (docs/BENCHMARKS.md), one probe for both
// so that their ratios are comparable.
#include <cstddef>

#include "core/thread_pool.h"

namespace fp4lm {

// Bytes per second: the best of `reps` passes of the pool's threads summing a buffer of `bytes`
// (make it far larger than the caches; rounded down to 32 KiB, at least one such piece) with
// 32-byte loads. The buffer is allocated and written once per call.
double read_bandwidth(size_t bytes, int reps, ThreadPool& pool);

}  // namespace fp4lm
