#include "engine/causal_lm_step_model.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"

namespace fp4lm::engine {

void CausalLmStepModel::forward(std::span<const StepChunk> chunks) {
  batch_.clear();
  for (const StepChunk& c : chunks) {
    model::SequenceChunk s;
    s.state = &store_.get(c.seq);
    s.tokens = c.tokens;
    s.n = c.n;
    s.logits = !c.logits ? model::LogitsMode::none : c.all_logits ? model::LogitsMode::all : model::LogitsMode::last;
    s.out = c.logits;
    s.rewindable = c.rewindable;
    batch_.push_back(s);
  }
  lm_.forward(batch_);  // every sequence of the step in one pass over the weights
}

PrefixSupport CausalLmStepModel::prefix_support(int64_t block_size) const {
  PrefixSupport s;
  const model::StateLayout& layout = lm_.state_layout();
  s.block_bytes = model::KvCache::reserved_bytes(layout.kv_slots(), block_size, block_size, lm_.kv_dtype());
  if (!layout.recurrent_slots().empty()) {
    s.snapshot_grid = std::lcm(block_size, layout.row_alignment());
    for (size_t f : layout.recurrent_slots()) s.state_bytes += f * sizeof(float);
  }
  for (const model::KvSlotShape& slot : layout.kv_slots())
    if (slot.window > 0) {
      const int64_t rows = model::KvCache::slot_rows(slot, lm_.max_model_len(), lm_.prefill_chunk());
      if (rows >= lm_.max_model_len()) continue;  // the ring never wraps
      const int64_t most = rows - block_size + 1;
      if (most < 1) {
        s.unsupported = fmt::format("a sliding-window ring of {} rows is shorter than a block of {} tokens", rows,
                                    block_size);
        return s;
      }
      s.max_chunk = s.max_chunk > 0 ? std::min(s.max_chunk, most) : most;
    }
  return s;
}

void CausalLmStepModel::save_positions(int64_t seq, int64_t pos0, int64_t n, std::vector<uint8_t>& kv,
                                       std::vector<uint8_t>* state) {
  const model::SequenceState& st = store_.get(seq);
  kv.resize(st.kv().block_bytes(n));
  st.kv().save_rows(pos0, n, kv.data());
  if (!state) return;
  if (pos0 + n != st.length())
    fail("prefix cache: the recurrent state of sequence {} is at {} positions, not {}", seq, st.length(), pos0 + n);
  state->resize(st.recurrent_floats() * sizeof(float));
  st.save_recurrent(state->data());
}

void CausalLmStepModel::load_positions(int64_t seq, std::span<const std::vector<uint8_t>* const> blocks,
                                       int64_t block_size, const std::vector<uint8_t>* state) {
  model::SequenceState& st = store_.get(seq);
  const int64_t length = static_cast<int64_t>(blocks.size()) * block_size;
  const size_t want = st.kv().block_bytes(block_size);
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (blocks[b]->size() != want)
      fail("prefix cache: block {} holds {} bytes, the model's blocks {}", b, blocks[b]->size(), want);
    st.kv().load_rows(static_cast<int64_t>(b) * block_size, block_size, blocks[b]->data(), length);
  }
  if (state && state->size() != st.recurrent_floats() * sizeof(float))
    fail("prefix cache: a state snapshot of {} bytes, the model's is {}", state->size(),
         st.recurrent_floats() * sizeof(float));
  st.resume_at(length, state ? state->data() : nullptr);
}

}  // namespace fp4lm::engine
