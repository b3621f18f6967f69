// A sequence's bytes as the layers declared them (model/state/state_bytes.h,
// what `inspect` reports) against what the engine reserves (KvCache, CausalLM::sequence_bytes),
// for a dense model, Nemotron-H (Mamba-2 layers hold recurrent state, not K/V), Gemma 4 (per-layer
// head sizes, sliding rings, K/V shared between layers) and DeepSeek-V3 (MLA's latent), with the
// numbers worked out by hand from the synthetic configs.
#include <gtest/gtest.h>

#include "common/paths.h"
#include "model/causal_lm.h"
#include "model/state/state_bytes.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::state_bytes_test {
namespace {

struct Case {
  const char* arch;
  int64_t layers;
  int64_t kv_shared_layers;
  size_t per_position;  // bfloat16 bytes each position adds
  size_t fixed;         // bytes independent of the context (prefill chunk 16)
};

// Synthetic defaults: kv_heads 2, head_dim 16; bfloat16 activations, so a bfloat16 cache.
const Case kCases[] = {
    // 2 layers × K and V × 2 heads × 16 × 2 bytes.
    {"Qwen3ForCausalLM", 2, 0, 2 * 2 * 2 * 16 * 2, 0},
    // Pattern M*M-: one attention layer (2 × 2 × 16 × 2); two Mamba-2 layers of (conv_kernel 4 - 1) ×
    // conv_dim (4 heads × 8 + 2 groups × 16 state = 96) + 4 heads × 8 × 16 state floats, two buffers.
    {"NemotronHForCausalLM", 4, 0, 2 * 2 * 16 * 2, 2 * (3 * 96 + 4 * 8 * 16) * 2 * 4},
    // Layers sliding, full, sliding, full, the last two reading the K/V of layers 0 and 1: layer 1
    // (full: 1 global KV head of global_head_dim 32) grows with the context; layer 0 is a ring of
    // window 8 - 1 + 16 rows of 2 heads × 16.
    {"Gemma4ForCausalLM", 4, 2, 2 * 1 * 32 * 2, 2 * 2 * 16 * (8 - 1 + 16) * 2},
    // 2 layers of one latent plane: kv_lora_rank 32 + qk_rope_head_dim 8.
    {"DeepseekV3ForCausalLM", 2, 0, 2 * (32 + 8) * 2, 0},
};

TEST(StateBytes, DeclaredBytesAreWhatTheEngineReserves) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.arch);
    test::TempDir dir;
    synth::SyntheticOptions s;
    s.architecture = k.arch;
    s.algo = quant::QuantAlgo::None;
    s.layers = k.layers;
    s.kv_shared_layers = k.kv_shared_layers;
    const std::string d = (dir.path() / "ck").string();
    synth::write_synthetic_checkpoint(d, s);
    LoadOptions lo;
    lo.progress = false;
    lo.prefill_chunk = 16;
    const auto lm = CausalLM::load(d, EngineOptions{}, lo);
    ASSERT_EQ(lm->kv_dtype(), DType::BF16);
    const StateLayout& layout = lm->state_layout();
    const size_t per = state_bytes_per_position(layout, lm->kv_dtype());
    const size_t fixed = state_fixed_bytes(layout, lm->prefill_chunk(), lm->kv_dtype());
    EXPECT_EQ(per, k.per_position);
    EXPECT_EQ(fixed, k.fixed);
    // The engine's own numbers: a sequence's reservation at any context past the rings, and the
    // bytes its KV cache adds per position.
    for (int64_t cap : {64, 300, 512}) {
      EXPECT_EQ(lm->sequence_bytes(cap), fixed + per * static_cast<size_t>(cap)) << cap;
      EXPECT_EQ(lm->new_sequence(cap).kv().bytes_per_position(), per) << cap;
    }
  }
}

}  // namespace
}  // namespace fp4lm::model::state_bytes_test
