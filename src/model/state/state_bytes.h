#pragma once
// What a sequence's state costs, split as a report of the RAM a context needs (`inspect`) wants
// it, from the layers' own declaration (model/state/state_layout.h): the bytes each position adds (the
// K/V of the slots that keep every position) and the bytes that do not grow with the context (the
// sliding-window rings, `max_step_rows` beyond their window, and the recurrent slots' two
// buffers). StateLayout::sequence_bytes(n, max_step_rows, dtype) = state_fixed_bytes +
// n × state_bytes_per_position once n covers every ring (n >= window - 1 + max_step_rows).
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

size_t state_bytes_per_position(const StateLayout& layout, DType kv_dtype);
size_t state_fixed_bytes(const StateLayout& layout, int64_t max_step_rows, DType kv_dtype);

}  // namespace fp4lm::model
