#pragma once
// The helpers the whole-model tests compare logits with: every position's logits of one forward
// call, their distance to a float64 reference relative to the reference's range, and the check
// that decoding, chunked prefill and batching change nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "model/causal_lm.h"

namespace fp4lm::model {

// Logits [toks.size(), vocab] of `toks` run through a fresh sequence in one forward call.
inline std::vector<float> all_logits(const CausalLM& lm, const std::vector<int32_t>& toks) {
  SequenceState s = lm.new_sequence();
  std::vector<float> out(toks.size() * lm.vocab_size());
  lm.forward(s, toks.data(), static_cast<int64_t>(toks.size()), LogitsMode::all, out.data());
  return out;
}

// all_logits of the checkpoint in `dir`, loaded with `o` (float32 activations unless o says).
inline std::vector<float> checkpoint_logits(const std::string& dir, const std::vector<int32_t>& toks,
                                            EngineOptions o = {}) {
  if (o.dtype.empty()) o.dtype = "float32";
  return all_logits(*CausalLM::load(dir, o), toks);
}

// Logits [toks.size(), vocab] the decode path gives: the first `prefill` tokens in one forward
// call (none when 0), then one token per call, the sequence's caches carrying every earlier
// position. `capacity`: the sequence's (0: the model's default).
inline std::vector<float> prefill_then_decode_logits(const CausalLM& lm, const std::vector<int32_t>& toks,
                                                     size_t prefill, int64_t capacity = 0) {
  const size_t vocab = static_cast<size_t>(lm.vocab_size());
  SequenceState s = lm.new_sequence(capacity);
  std::vector<float> out(toks.size() * vocab);
  if (prefill > 0) lm.forward(s, toks.data(), static_cast<int64_t>(prefill), LogitsMode::all, out.data());
  for (size_t t = prefill; t < toks.size(); ++t) lm.forward(s, &toks[t], 1, LogitsMode::last, out.data() + t * vocab);
  return out;
}

inline bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Max |got - want| over all rows, relative to max |want|.
inline double max_rel_diff(const std::vector<float>& got, const std::vector<std::vector<double>>& want) {
  double diff = 0, scale = 0;
  size_t k = 0;
  for (const auto& row : want)
    for (double w : row) {
      diff = std::max(diff, std::abs(static_cast<double>(got[k++]) - w));
      scale = std::max(scale, std::abs(w));
    }
  return diff / scale;
}

// Rows [rows][cols] of a float64 file (the goldens scripts' `*.f64`: transformers' logits, row-major).
inline std::vector<std::vector<double>> read_f64_rows(const std::string& path, size_t rows, size_t cols) {
  std::ifstream f(path, std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(raw.size(), rows * cols * sizeof(double)) << path;
  std::vector<std::vector<double>> out(rows, std::vector<double>(cols));
  for (size_t r = 0; r < rows && (r + 1) * cols * sizeof(double) <= raw.size(); ++r)
    std::memcpy(out[r].data(), raw.data() + r * cols * sizeof(double), cols * sizeof(double));
  return out;
}

// Max |got - want| relative to the range (max - min) of want, printed under `label: what`; every
// row's argmax equal (an EXPECT per row).
inline double range_rel_diff(const std::vector<float>& got, const std::vector<std::vector<double>>& want,
                             const std::string& label, const std::string& what) {
  const size_t vocab = want[0].size();
  double lo = want[0][0], hi = lo, diff = 0;
  for (size_t r = 0; r < want.size(); ++r)
    for (size_t v = 0; v < vocab; ++v) {
      lo = std::min(lo, want[r][v]);
      hi = std::max(hi, want[r][v]);
      diff = std::max(diff, std::abs(static_cast<double>(got[r * vocab + v]) - want[r][v]));
    }
  for (size_t r = 0; r < want.size(); ++r) {
    const auto gr = got.begin() + static_cast<std::ptrdiff_t>(r * vocab);
    EXPECT_EQ(std::max_element(gr, gr + static_cast<std::ptrdiff_t>(vocab)) - gr,
              std::max_element(want[r].begin(), want[r].end()) - want[r].begin())
        << what << ": argmax at position " << r;
  }
  const double rel = diff / (hi - lo);
  std::printf("[ %s ] %s: max |fp4lm f32 - transformers f64| / range = %.2e\n", label.c_str(), what.c_str(), rel);
  return rel;
}

// Decoding `toks` one token at a time gives one forward's logits (within 1e-5: a step's GEMV
// sums in another order than a prefill's GEMM); loaded with prefill_chunk 3 the model gives them
// bit for bit, and three sequences in one batch give each one's logits alone, bit for bit.
inline void expect_steps_chunks_and_batches_match_one_forward(const std::string& dir, const EngineOptions& o,
                                                              const std::vector<int32_t>& toks) {
  auto lm = CausalLM::load(dir, o);
  const int64_t vocab = lm->vocab_size();
  const std::vector<float> whole = all_logits(*lm, toks);
  SequenceState s = lm->new_sequence();
  std::vector<float> step(static_cast<size_t>(vocab));
  for (size_t t = 0; t < toks.size(); ++t) {
    lm->forward(s, &toks[t], 1, LogitsMode::last, step.data());
    for (int64_t v = 0; v < vocab; ++v) ASSERT_NEAR(step[v], whole[t * vocab + v], 1e-5) << t;
  }
  LoadOptions lo;
  lo.prefill_chunk = 3;
  auto chunked = CausalLM::load(dir, o, lo);
  EXPECT_EQ(all_logits(*chunked, toks), whole);
  const std::vector<std::vector<int32_t>> prompts = {toks, {9, 8, 7}, {50, 60, 70, 80, 90, 11}};
  std::vector<SequenceState> states;
  std::vector<std::vector<float>> got(prompts.size());
  std::vector<SequenceChunk> batch;
  for (size_t i = 0; i < prompts.size(); ++i) states.push_back(chunked->new_sequence());
  for (size_t i = 0; i < prompts.size(); ++i) {
    got[i].resize(prompts[i].size() * vocab);
    batch.push_back({&states[i], prompts[i].data(), static_cast<int64_t>(prompts[i].size()), LogitsMode::all,
                     got[i].data()});
  }
  chunked->forward(batch);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], all_logits(*chunked, prompts[i])) << i;
}

}  // namespace fp4lm::model
