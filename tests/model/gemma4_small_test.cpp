// Gemma 4 as its small models (E2B / E4B) are built — per-layer input embeddings (PLE), the last
// layers reading an earlier layer's K/V (num_kv_shared_layers), their double-wide MLPs — against
// the float64 forward of tests/reference/gemma_reference.h: flat and VL, token by token, chunked
// prefill, batches, bfloat16; the shared layers store no K/V; config and tensor errors name what
// is wrong. NVIDIA publishes none of these models in NVFP4 (docs/RUNTIME.md).
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "common/paths.h"
#include "model/causal_lm.h"
#include "reference/gemma_reference.h"

namespace fp4lm::model::gemma4_small_test {
namespace {

using namespace gemma_ref;
using test::TempDir;

TEST(Gemma4Small, Float32MatchesTheFloat64ReferenceFlatAndVl) {
  Gemma m = make_gemma4_small();
  const auto want = reference(m, kTokens);
  for (bool vl : {false, true}) {
    TempDir dir;
    write_gemma(m, dir.path(), vl);
    const double d = max_rel_diff(all_logits(*CausalLM::load(dir.path().string(), f32()), kTokens), want);
    EXPECT_LT(d, 2e-5) << (vl ? "VL" : "flat");
    RecordProperty(vl ? "vl_max_rel_diff" : "flat_max_rel_diff", fmt::format("{:.2e}", d));
  }
  // Each feature matters: without the per-layer inputs, or with the shared layers' K/V their own
  // producers' neighbours', the reference moves far.
  Gemma no_ple = m;
  no_ple.ple = 0;
  Gemma other_src = m;
  other_src.kv_src = {-1, -1, -1, 0, 1};
  for (const Gemma* g : {&no_ple, &other_src}) {
    double diff = 0, scale = 0;
    const auto r = reference(*g, kTokens);
    for (size_t t = 0; t < r.size(); ++t)
      for (size_t i = 0; i < r[t].size(); ++i) {
        diff = std::max(diff, std::abs(r[t][i] - want[t][i]));
        scale = std::max(scale, std::abs(want[t][i]));
      }
    EXPECT_GT(diff / scale, 1e-2);
  }
}

TEST(Gemma4Small, TokenByTokenChunkedAndBatchedEqualOneForward) {
  TempDir dir;
  write_gemma(make_gemma4_small(16), dir.path());
  expect_steps_chunks_and_batches_match_one_forward(dir.path().string(), f32(), kTokens);
}

// As the MoE's (gemma4_moe_test.cpp): nearly one-hot attention (softmax scale 1 on normalized
// q/k) can jump at single positions; all but at most 3 of 13 within 0.1 (measured on AVX-512:
// the worst 1.1e-1).
TEST(Gemma4Small, Bfloat16ActivationsStayCloseToTheReference) {
  expect_bf16_load_close_to_reference(make_gemma4_small(), /*flips=*/3);
}

// Layers 3 and 4 read the K/V of layers 2 and 1 and store none: the sequence holds layer 1's
// full K/V and the windows of layers 0 and 2.
TEST(Gemma4Small, SharedLayersStoreNoKv) {
  Gemma m = make_gemma4_small();
  TempDir dir;
  write_gemma(m, dir.path());
  LoadOptions lo;
  lo.prefill_chunk = 8;
  auto lm = CausalLM::load(dir.path().string(), f32(), lo);
  EXPECT_EQ(lm->state_layout().kv_slots().size(), 3u);
  for (int64_t cap : {16, 256}) {
    const size_t full = 2 * static_cast<size_t>(cap) * m.full_kvh * m.full_hd * sizeof(float);
    const size_t sliding = 2 * 2 * static_cast<size_t>(m.window - 1 + 8) * m.kvh * m.hd * sizeof(float);
    EXPECT_EQ(lm->sequence_bytes(cap), full + sliding) << cap;
  }
}

TEST(Gemma4Small, BadConfigsAndMissingTensorsAreErrorsNamingThem) {
  auto load_error = [](const Gemma& m, const LoadOptions& lo = {}) {
    TempDir dir;
    write_gemma(m, dir.path());
    return test::error_of([&] { CausalLM::load(dir.path().string(), f32(), lo); });
  };
  Gemma m = make_gemma4_small();
  m.config["num_kv_shared_layers"] = 5;
  EXPECT_NE(load_error(m).find("num_kv_shared_layers = 5 must be in [0, num_hidden_layers = 5)"), std::string::npos);
  m.config["num_kv_shared_layers"] = 4;  // layer 1 (full) would have no earlier full layer
  EXPECT_NE(load_error(m).find("layer 1 (full) has no earlier full layer"), std::string::npos) << load_error(m);
  for (const char* t : {"model.embed_tokens_per_layer.weight", "model.layers.3.per_layer_input_gate.weight",
                        "model.per_layer_projection_norm.weight", "model.layers.4.self_attn.q_norm.weight"}) {
    Gemma bad = make_gemma4_small();
    bad.w.erase(t);
    const std::string e = load_error(bad);
    EXPECT_NE(e.find(std::string(t).substr(0, std::string(t).rfind('.'))), std::string::npos) << t << ": " << e;
  }
}

}  // namespace
}  // namespace fp4lm::model::gemma4_small_test
