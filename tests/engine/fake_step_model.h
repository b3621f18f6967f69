#pragma once
// A StepModel with no weights, for scheduler tests: each sequence's next-token logits depend
// only on its own history (the argmax is (last * 3 + 1) mod vocab), every forward call is
// recorded, and memory is counted in "bytes" of 100 per position. With depth > 1 it pipelines
// (StepModel::submit / collect): a submitted forward runs only when collected.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <span>
#include <stdexcept>
#include <vector>

#include "engine/step_model.h"

namespace fp4lm::engine::test {

class FakeStepModel : public StepModel {
 public:
  int64_t vocab = 32, max_len = 64;
  std::vector<int64_t> eos = {0};
  std::map<int64_t, std::vector<int32_t>> history;       // live sequences
  std::map<int64_t, int64_t> capacity;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> calls;  // per forward: (seq, n)
  int64_t next = 100;
  bool fail_next = false;      // the next forward throws
  bool fail_allocate = false;  // the next allocate throws (as CausalLM does on a bad capacity)
  bool fail_release = false;   // the next release throws (a failure outside forward and sampling)
  PrefixSupport prefix;        // prefix caching: block_bytes is 4 per token (the tokens themselves)
  int64_t loaded = 0;          // positions load_positions has put into sequences

  static int32_t successor(int32_t t, int64_t vocab) { return static_cast<int32_t>((t * 3 + 1) % vocab); }

  int64_t vocab_size() const override { return vocab; }
  int64_t max_model_len() const override { return max_len; }
  std::vector<int64_t> eos_ids() const override { return eos; }
  size_t bytes_for(int64_t cap) const override { return static_cast<size_t>(cap) * 100; }
  int64_t allocate(int64_t cap) override {
    if (fail_allocate) {
      fail_allocate = false;
      throw std::runtime_error("fake allocation failure");
    }
    history[next] = {};
    capacity[next] = cap;
    return next++;
  }
  void release(int64_t seq) override {
    if (fail_release) {
      fail_release = false;
      throw std::runtime_error("fake release failure");
    }
    history.erase(seq);
    capacity.erase(seq);
  }
  // The next-token logits after `last`: the successor clearly first (or, with `spread`, a fixed
  // distribution over the whole vocabulary for sampling tests).
  std::vector<float> spread;
  void fill_logits(int32_t last, float* row) const {
    if (!spread.empty()) {
      for (int64_t t = 0; t < vocab; ++t) row[t] = spread[static_cast<size_t>((t + last) % vocab)];
      return;
    }
    const int32_t want = successor(last, vocab);
    for (int64_t t = 0; t < vocab; ++t) row[t] = static_cast<float>(-0.01 * static_cast<double>(t));
    row[want] = 5;
  }
  bool rewindable = true;
  bool can_rewind() const override { return rewindable; }
  void rewind(int64_t seq, int64_t length) override {
    auto& h = history.at(seq);
    if (length > static_cast<int64_t>(h.size())) throw std::runtime_error("rewind past the end");
    h.resize(static_cast<size_t>(length));
  }
  PrefixSupport prefix_support(int64_t block_size) const override {
    PrefixSupport p = prefix;
    p.block_bytes = 4 * static_cast<size_t>(block_size);
    if (p.snapshot_grid > 0) p.state_bytes = 4;
    return p;
  }
  // A block's bytes are its tokens; a state is the length it was saved at.
  void save_positions(int64_t seq, int64_t pos0, int64_t n, std::vector<uint8_t>& kv,
                      std::vector<uint8_t>* state) override {
    const auto& h = history.at(seq);
    if (pos0 + n > static_cast<int64_t>(h.size())) throw std::runtime_error("saving positions not computed");
    kv.resize(4 * static_cast<size_t>(n));
    std::memcpy(kv.data(), h.data() + pos0, kv.size());
    if (state) {
      const int32_t len = static_cast<int32_t>(h.size());
      state->resize(4);
      std::memcpy(state->data(), &len, 4);
    }
  }
  void load_positions(int64_t seq, std::span<const std::vector<uint8_t>* const> blocks, int64_t block_size,
                      const std::vector<uint8_t>* state) override {
    auto& h = history.at(seq);
    if (!h.empty()) throw std::runtime_error("loading into a sequence that is not empty");
    for (const auto* b : blocks) {
      if (b->size() != 4 * static_cast<size_t>(block_size)) throw std::runtime_error("bad block size");
      const size_t at = h.size();
      h.resize(at + static_cast<size_t>(block_size));
      std::memcpy(h.data() + at, b->data(), b->size());
    }
    if (state) {
      int32_t len = 0;
      std::memcpy(&len, state->data(), 4);
      if (len != static_cast<int32_t>(h.size())) throw std::runtime_error("state saved at another length");
    } else if (prefix.snapshot_grid > 0) {
      throw std::runtime_error("a recurrent model resumed without its state");
    }
    loaded += static_cast<int64_t>(h.size());
  }
  // Pipelining: up to `depth` forwards in flight. submit() writes NaN where the logits go (a
  // scheduler that samples before collect() fails), refuses a sequence already in flight or
  // more than `depth` forwards; collect() runs the oldest. in_flight_max: the most at once.
  int64_t depth = 1;
  std::deque<std::vector<StepChunk>> pending;
  size_t in_flight_max = 0;
  int64_t max_in_flight() const override { return depth; }
  void submit(std::span<const StepChunk> chunks) override {
    if (depth <= 1) return forward(chunks);
    for (const auto& p : pending)
      for (const StepChunk& c : p)
        for (const StepChunk& d : chunks)
          if (c.seq == d.seq) throw std::runtime_error("a sequence in two forwards in flight");
    if (static_cast<int64_t>(pending.size()) >= depth) throw std::runtime_error("more forwards in flight than depth");
    for (const StepChunk& c : chunks)
      if (c.logits) std::fill_n(c.logits, (c.all_logits ? c.n : 1) * vocab, std::nanf(""));
    pending.emplace_back(chunks.begin(), chunks.end());
    in_flight_max = std::max(in_flight_max, pending.size());
  }
  void collect() override {
    if (depth <= 1) return;
    if (pending.empty()) throw std::runtime_error("collect without a forward in flight");
    const std::vector<StepChunk> c = std::move(pending.front());
    pending.pop_front();
    forward(c);
  }
  void forward(std::span<const StepChunk> chunks) override {
    if (fail_next) {
      fail_next = false;
      throw std::runtime_error("fake model failure");
    }
    calls.emplace_back();
    for (const StepChunk& c : chunks) {
      auto& h = history.at(c.seq);
      h.insert(h.end(), c.tokens, c.tokens + c.n);
      if (static_cast<int64_t>(h.size()) > capacity.at(c.seq)) throw std::runtime_error("over capacity");
      calls.back().emplace_back(c.seq, c.n);
      if (!c.logits) continue;
      // Every row's logits (speculative verify), or the last one's.
      for (int64_t r = c.all_logits ? 0 : c.n - 1; r < c.n; ++r) {
        const int32_t last = h[h.size() - static_cast<size_t>(c.n - r)];
        float* row = c.logits + (c.all_logits ? r : 0) * vocab;
        fill_logits(last, row);
      }
    }
  }
};

}  // namespace fp4lm::engine::test
