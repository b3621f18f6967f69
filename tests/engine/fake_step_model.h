#pragma once
// A StepModel with no weights, for scheduler tests: each sequence's next-token logits depend
// only on its own history (the argmax is (last * 3 + 1) mod vocab), every forward call is
// recorded, and memory is counted in "bytes" of 100 per position.
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
      const int32_t want = successor(h.back(), vocab);
      for (int64_t t = 0; t < vocab; ++t) c.logits[t] = static_cast<float>(-0.01 * static_cast<double>(t));
      c.logits[want] = 5;
    }
  }
};

}  // namespace fp4lm::engine::test
