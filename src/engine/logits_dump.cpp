#include "engine/logits_dump.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "engine/causal_lm_step_model.h"

namespace fp4lm::engine {

std::vector<float> sequence_logits(const model::CausalLM& lm, const std::vector<int32_t>& ids) {
  CausalLmStepModel model(lm);
  return sequence_logits(model, ids);
}

std::vector<float> sequence_logits(StepModel& model, const std::vector<int32_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size()), vocab = model.vocab_size();
  if (n == 0) fail("cannot compute logits of an empty sequence");
  if (n > model.max_model_len())
    fail("sequence of {} tokens exceeds the maximum model length {} (max_model_len)", n, model.max_model_len());
  for (int32_t id : ids)
    if (id < 0 || id >= vocab) fail("token id {} is outside the vocabulary [0, {})", id, vocab);
  const ScopedSequence scoped(model, n);
  const int64_t seq = scoped.id();
  std::vector<float> out(static_cast<size_t>(n * vocab));
  constexpr int64_t kChunk = 64;  // the same forward chunks `eval` scores with
  for (int64_t s = 0; s < n; s += kChunk) {
    const int64_t m = std::min(kChunk, n - s);
    const StepChunk chunk{seq, ids.data() + s, m, out.data() + s * vocab, /*all_logits=*/true};
    model.forward(std::span<const StepChunk>(&chunk, 1));
  }
  return out;
}

void write_logits_jsonl(const model::CausalLM& lm, const std::vector<std::vector<int32_t>>& sequences,
                        const std::string& path) {
  CausalLmStepModel model(lm);
  write_logits_jsonl(model, sequences, path);
}

void write_logits_jsonl(StepModel& lm, const std::vector<std::vector<int32_t>>& sequences, const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!f) fail("{}: cannot open for writing: {}", path, std::strerror(errno));
  const int64_t vocab = lm.vocab_size();
  fmt::memory_buffer line;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const std::vector<int32_t>& ids = sequences[i];
    if (ids.empty()) continue;
    std::vector<float> logits;
    try {
      logits = sequence_logits(lm, ids);
    } catch (const Error& e) {
      fail("sequence {}: {}", i, e.what());
    }
    line.clear();
    fmt::format_to(std::back_inserter(line), "{{\"sequence\": {}, \"ids\": [{}], \"vocab\": {}, \"logits\": [", i,
                   fmt::join(ids, ", "), vocab);
    for (size_t t = 0; t < ids.size(); ++t) {
      const float* row = logits.data() + t * static_cast<size_t>(vocab);
      // fmt's default float format is the shortest decimal that reads back as the same float.
      fmt::format_to(std::back_inserter(line), "{}[{}]", t ? ", " : "",
                     fmt::join(row, row + vocab, ", "));
    }
    fmt::format_to(std::back_inserter(line), "]}}\n");
    if (std::fwrite(line.data(), 1, line.size(), f.get()) != line.size())
      fail("{}: write failed: {}", path, std::strerror(errno));
  }
  if (std::fflush(f.get()) != 0) fail("{}: write failed: {}", path, std::strerror(errno));
}

}  // namespace fp4lm::engine
