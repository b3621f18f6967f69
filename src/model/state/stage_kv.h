#pragma once
// K/V that crosses a pipeline cut: a layer that attends to an earlier layer's K/V
// (ArchDef::kv_source; Gemma 4's num_kv_shared_layers) may run on a later stage than that layer.
// The stage that stores such K/V sends the rows each forward step stored, with the step's
// residual stream (StageLink), to the next stage, which writes them into its own slot of that
// layer (declared by its first reader, StateLayout::expect_kv_from_earlier_stage) and passes on
// what stages after it read. The rows are the KV cache's raw bytes, so every stage attends to the
// very values one process would.
//
// A step's K/V part (model/state/stage_carried.h frames it with the rest of the message): per layer sent, in ascending order, i64 layer, u64 bytes, then the rows of
// the step's sequences in row order (KvCache::save_slot_rows of each).
#include <cstdint>
#include <span>
#include <vector>

#include "model/state/kv_cache.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

// One sequence's rows of a forward step: positions [pos0, pos0 + n) of its cache.
struct StageKvRows {
  KvCache* kv = nullptr;
  int64_t pos0 = 0, n = 0;
};

class StageKv {
 public:
  StageKv() = default;
  // `in`: the layers before `first` whose K/V a layer of this stage or a later one reads (what
  // the stage before sends); `out`: the layers before this stage's end whose K/V a later stage
  // reads (what this stage sends); both ascending (kv_read_across).
  StageKv(std::vector<int64_t> in, std::vector<int64_t> out, int64_t first)
      : in_(std::move(in)), out_(std::move(out)), first_(first) {}
  const std::vector<int64_t>& received() const { return in_; }
  const std::vector<int64_t>& sent() const { return out_; }

  // Writes a step's received rows into this stage's slots of those layers; returns each received
  // layer's segment (views into `msg`), for pack() to pass on. Error on a message of another form.
  std::vector<std::span<const uint8_t>> unpack(std::span<const uint8_t> msg, const StateLayout& layout,
                                               std::span<const StageKvRows> rows) const;
  // The message this stage sends after a step: its own layers' rows read from their slots, the
  // earlier stages' passed on from `received` (unpack's result).
  std::vector<uint8_t> pack(const StateLayout& layout, std::span<const StageKvRows> rows,
                            const std::vector<std::span<const uint8_t>>& received) const;

 private:
  std::vector<int64_t> in_, out_;
  int64_t first_ = 0;
};

}  // namespace fp4lm::model
