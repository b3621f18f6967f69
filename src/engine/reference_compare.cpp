#include "engine/reference_compare.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace fp4lm::engine {

ReferenceComparison compare_to_reference(const model::CausalLM& q, const model::CausalLM& r,
                                         const std::vector<std::vector<int32_t>>& sequences) {
  const int64_t vocab = q.vocab_size();
  if (r.vocab_size() != vocab)
    fail("the model has a vocabulary of {} tokens but the reference {} ({}): they cannot be compared", vocab,
         r.vocab_size(), r.checkpoint().dir());
  constexpr int64_t kChunk = 64;
  ReferenceComparison out;
  std::vector<float> lq_logits(static_cast<size_t>(kChunk * vocab)), lr_logits(lq_logits.size());
  std::vector<float> lq(static_cast<size_t>(vocab)), lr(static_cast<size_t>(vocab));
  for (size_t s = 0; s < sequences.size(); ++s) {
    const std::vector<int32_t>& ids = sequences[s];
    out.model.sequences += 1;
    out.reference.sequences += 1;
    const int64_t n = static_cast<int64_t>(ids.size());
    if (n < 2) continue;
    const int64_t limit = std::min(q.max_model_len(), r.max_model_len());
    if (n > limit)
      fail("sequence {} has {} tokens, more than the maximum model length {} (max_model_len)", s, n, limit);
    for (int64_t i = 0; i < n; ++i)
      if (ids[static_cast<size_t>(i)] < 0 || ids[static_cast<size_t>(i)] >= vocab)
        fail("sequence {}: token id {} at position {} is outside the vocabulary [0, {})", s, ids[static_cast<size_t>(i)],
             i, vocab);
    const int64_t inputs = n - 1;  // the last token is only a target
    model::SequenceState cq = q.new_sequence(inputs), cr = r.new_sequence(inputs);
    for (int64_t p = 0; p < inputs; p += kChunk) {
      const int64_t m = std::min(kChunk, inputs - p);
      q.forward(cq, ids.data() + p, m, model::LogitsMode::all, lq_logits.data());
      r.forward(cr, ids.data() + p, m, model::LogitsMode::all, lr_logits.data());
      for (int64_t i = 0; i < m; ++i) {
        const float* rowq = lq_logits.data() + i * vocab;
        const float* rowr = lr_logits.data() + i * vocab;
        const int32_t target = ids[static_cast<size_t>(p + i + 1)];
        double lseq = 0, lser = 0;
        log_softmax(rowq, vocab, lq.data(), &lseq);
        log_softmax(rowr, vocab, lr.data(), &lser);
        out.model.nll_sum += lseq - static_cast<double>(rowq[target]);
        out.reference.nll_sum += lser - static_cast<double>(rowr[target]);
        out.model.tokens += 1;
        out.reference.tokens += 1;
        double kl = 0;
        for (int64_t v = 0; v < vocab; ++v) {
          const double a = lr[static_cast<size_t>(v)], b = lq[static_cast<size_t>(v)];
          kl += std::exp(a) * (a - b);
        }
        out.kl_sum += std::max(0.0, kl);  // rounding can leave -1e-17 for identical models
        out.top1_agree += std::max_element(rowq, rowq + vocab) - rowq == std::max_element(rowr, rowr + vocab) - rowr;
      }
    }
  }
  return out;
}

}  // namespace fp4lm::engine
