#pragma once
// How a pipeline splits a model: contiguous ranges of decoder layers, one per rank, balanced by
// the bytes each stage reads per token (its layers' tensors, of routed experts the top_k /
// num_experts share a token reads; the last stage also lm_head, the first only one embedding row
// per token), taken from config.json and the safetensors headers alone. And the
// fingerprint of a stage's files that every rank compares with rank 0's before it loads.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/checkpoint.h"

namespace fp4lm::dist {

struct Stage {
  int64_t first = 0, end = 0;  // decoder layers [first, end)
  uint64_t bytes = 0;          // what it reads per token
};

// The bytes each decoder layer reads per token (index = layer): its tensors, a routed-experts
// tensor counted with top_k / num_experts of its bytes (model/load/bytes_read_per_token.h), dense
// ones whole; and lm_head's (the embedding's when tied): the costs the split balances.
struct LayerBytes {
  std::vector<uint64_t> layer;
  uint64_t head = 0;
};
LayerBytes layer_bytes(const io::Checkpoint& ckpt);

// `n` contiguous non-empty stages minimizing the largest stage's bytes (UsageError when the model
// has fewer than n layers).
std::vector<Stage> plan_stages(const LayerBytes& b, int n);

// What a stage's rank must hold identical to rank 0's: config.json, and per safetensors file the
// headers (name, dtype, shape, size) of the stage's tensors, as 64-bit hashes.
struct StageFingerprint {
  uint64_t config = 0;
  std::map<std::string, uint64_t> files;  // file name (in the checkpoint directory) -> hash
};
StageFingerprint fingerprint(const io::Checkpoint& ckpt, const Stage& s, int64_t num_layers);

}  // namespace fp4lm::dist
