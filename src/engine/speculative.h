#pragma once
// Speculative decoding, vLLM's interface (`--speculative-config` JSON, its field names): a
// proposer drafts up to num_speculative_tokens next tokens of a decoding sequence, one batched
// forward verifies them all (the logits after the last sampled token and after each draft), and
// the scheduler keeps the drafts the target model's own sampling agrees with plus one token of
// its own. Greedy requests produce exactly the tokens they produce without speculation; sampled
// ones keep a draft d with probability p(d) and otherwise draw from p with d removed
// (Sampler::verify), which is exact rejection sampling for a deterministic draft: the output is
// distributed as without speculation.
//
// method "mtp" (vLLM also spells it qwen3_next_mtp): the checkpoint's own MTP head drafts
// (engine/mtp_drafter.h); the model must be loaded with it (model::LoadOptions::mtp).
//
// method "ngram" (prompt lookup): the longest n-gram of prompt_lookup_min..prompt_lookup_max
// tokens that ends the sequence and occurred earlier in it; the draft is what followed its most
// recent earlier occurrence.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fp4lm::engine {

struct SpeculativeConfig {
  std::string method;  // "" = off, "ngram", "mtp" (engine/mtp_drafter.h)
  int64_t num_speculative_tokens = 0;
  int64_t prompt_lookup_min = 1, prompt_lookup_max = 4;
  bool enabled() const { return !method.empty(); }
};

// The JSON of --speculative-config / speculative_config: {"method": "ngram" | "mtp",
// "num_speculative_tokens": k (1..16), "prompt_lookup_max": n (default 4; or prompt_lookup_min
// when only that is given), "prompt_lookup_min": n (default 1)}. RequestError naming
// speculative_config and the field when anything is wrong (an unknown method or key included).
SpeculativeConfig parse_speculative_config(const std::string& json);

// Up to `k` draft tokens continuing `history` (prompt + output so far); empty when none.
std::vector<int32_t> propose_ngram(std::span<const int32_t> history, const SpeculativeConfig& c, int64_t k);

}  // namespace fp4lm::engine
