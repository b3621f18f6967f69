// Qwen3.5-MoE hybrid (gated delta-net + gated attention + MoE with shared expert), dense Qwen3.5
// and Qwen3-Next against the float64 forward of tests/reference/hybrid_reference.h (issue 14). Both
// checkpoint layouts (flat text-only and VL-nested with mtp/visual tensors), per-expert and fused
// 3-D expert tensors, GDN value/key head ratios 1, 2 and 4, prompt-at-once vs token-by-token vs
// any prefill chunk, batched vs alone, and a failed forward leaving the state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "common/paths.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "core/thread_pool.h"
#include "model/causal_lm.h"
#include "model/layers/gated_delta_rule.h"
#include "reference/hybrid_reference.h"

namespace fp4lm::model::qwen3_5_moe_test {
namespace {

using test::TempDir;
using namespace hybrid_ref;

// Qwen3.5-MoE and dense Qwen3.5 (tests/model/qwen3_5_test.cpp has the latter's quantized
// layouts), each with NV/NK 1, 2 and 4.
class HybridFamilyRatio : public ::testing::TestWithParam<std::tuple<Family, int64_t>> {
 protected:
  Hybrid model() const { return make_hybrid(std::get<1>(GetParam()), family() == Family::qwen3_5 ? 41 : 11, family()); }
  Family family() const { return std::get<0>(GetParam()); }
};

// Between the engine's own float32 paths (recurrent vs chunked delta rule, split prompts): the
// logits reach |2|, so a few float32 ulps of the larger ones.
constexpr double kTol = 2e-5;

TEST_P(HybridFamilyRatio, LogitsMatchFloat64ReferenceInBothLayouts) {
  Hybrid m = model();
  const auto want = reference(m, kTokens);
  TempDir flat, vl;
  write_hybrid(m, flat.path());
  write_hybrid(m, vl.path(), /*vl=*/true);
  auto a = CausalLM::load(flat.path().string(), f32());
  auto b = CausalLM::load(vl.path().string(), f32());
  const bool dense = family() == Family::qwen3_5;
  EXPECT_EQ(a->config().architecture, dense ? "Qwen3_5ForCausalLM" : "Qwen3_5MoeForCausalLM");
  EXPECT_EQ(b->config().architecture, dense ? "Qwen3_5ForConditionalGeneration" : "Qwen3_5MoeForConditionalGeneration");
  EXPECT_EQ(a->config().is_moe(), !dense);
  const auto got = all_logits(*a, kTokens);
  // float32 engine vs float64 reference: rounding only (the recurrence is short).
  EXPECT_LT(max_rel_diff(got, want), 2e-5);
  EXPECT_EQ(all_logits(*b, kTokens), got);  // the VL nesting changes names only
}

TEST_P(HybridFamilyRatio, TokenByTokenAndEveryPrefillChunkAgreeWithOnePass) {
  TempDir dir;
  write_hybrid(model(), dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32());
  const auto once = all_logits(*lm, kTokens);
  const int64_t vocab = lm->vocab_size();
  SequenceState s = lm->new_sequence();
  std::vector<float> step(vocab);
  for (size_t t = 0; t < kTokens.size(); ++t) {
    lm->forward(s, &kTokens[t], 1, LogitsMode::last, step.data());
    for (int64_t v = 0; v < vocab; ++v) ASSERT_NEAR(step[v], once[t * vocab + v], kTol) << "position " << t;
  }
  for (int64_t chunk : {1, 2, 3, 5, 8}) {
    LoadOptions lo;
    lo.prefill_chunk = chunk;
    auto c = CausalLM::load(dir.path().string(), f32(), lo);
    const auto got = all_logits(*c, kTokens);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], once[i], kTol) << "chunk " << chunk << " at " << i;
  }
  // A prompt split over two forward calls continues the recurrent state.
  SequenceState two = lm->new_sequence();
  std::vector<float> first(5 * vocab), rest((kTokens.size() - 5) * vocab);
  lm->forward(two, kTokens.data(), 5, LogitsMode::all, first.data());
  lm->forward(two, kTokens.data() + 5, static_cast<int64_t>(kTokens.size()) - 5, LogitsMode::all, rest.data());
  for (size_t i = 0; i < rest.size(); ++i) ASSERT_NEAR(rest[i], once[5 * vocab + i], kTol) << i;
}

INSTANTIATE_TEST_SUITE_P(MoeAndDense, HybridFamilyRatio,
                         ::testing::Combine(::testing::Values(Family::qwen3_5_moe, Family::qwen3_5),
                                            ::testing::Values(1, 2, 4)),
                         [](const auto& info) {
                           return fmt::format("{}_ratio{}", std::get<0>(info.param) == Family::qwen3_5 ? "dense" : "moe",
                                              std::get<1>(info.param));
                         });

class HybridRatio : public ::testing::TestWithParam<int64_t> {};

TEST_P(HybridRatio, FusedThreeDimensionalExpertTensorsMatchFloat64Reference) {
  Hybrid m = make_hybrid(GetParam());
  const auto want = reference(m, kTokens);
  TempDir flat, vl;
  write_hybrid(m, flat.path(), /*vl=*/false, /*fused_experts=*/true);
  write_hybrid(m, vl.path(), /*vl=*/true, /*fused_experts=*/true);
  auto a = CausalLM::load(flat.path().string(), f32());
  auto b = CausalLM::load(vl.path().string(), f32());
  const auto got = all_logits(*a, kTokens);
  EXPECT_LT(max_rel_diff(got, want), 2e-5) << "NV/NK " << GetParam();
  EXPECT_EQ(all_logits(*b, kTokens), got);
  // The same weights per expert (2-D) give the same logits bit for bit: views, same kernels.
  TempDir per_expert;
  write_hybrid(m, per_expert.path());
  EXPECT_EQ(all_logits(*CausalLM::load(per_expert.path().string(), f32()), kTokens), got);
}

TEST_P(HybridRatio, Qwen3NextFusedInterleavedProjectionsMatchFloat64Reference) {
  Hybrid m = make_hybrid(GetParam(), 17, Family::qwen3_next);
  const auto want = reference(m, kTokens);
  for (bool fused_experts : {false, true}) {
    TempDir dir;
    write_hybrid(m, dir.path(), /*vl=*/false, fused_experts);
    auto lm = CausalLM::load(dir.path().string(), f32());
    EXPECT_EQ(lm->config().architecture, "Qwen3NextForCausalLM");
    EXPECT_TRUE(lm->config().gdn.fused_qkvz);
    EXPECT_FALSE(lm->config().layer_is_moe(2));
    const auto once = all_logits(*lm, kTokens);
    EXPECT_LT(max_rel_diff(once, want), 2e-5) << "NV/NK " << GetParam() << " fused experts " << fused_experts;
    // Token by token through the recurrent state gives the same logits.
    SequenceState s = lm->new_sequence();
    const int64_t vocab = lm->vocab_size();
    std::vector<float> step(vocab);
    for (size_t t = 0; t < kTokens.size(); ++t) {
      lm->forward(s, &kTokens[t], 1, LogitsMode::last, step.data());
      for (int64_t v = 0; v < vocab; ++v) ASSERT_NEAR(step[v], once[t * vocab + v], 1e-5) << "position " << t;
    }
  }
  // The reference's Qwen3-Next rule matters: renormalizing the top-k (Qwen3.5's rule) would
  // disagree with the engine.
  Hybrid renorm = m;
  renorm.norm_topk = true;
  TempDir dir;
  write_hybrid(m, dir.path());
  EXPECT_GT(max_rel_diff(all_logits(*CausalLM::load(dir.path().string(), f32()), kTokens), reference(renorm, kTokens)),
            1e-3);
}

INSTANTIATE_TEST_SUITE_P(ValueHeadsPerKeyHead, HybridRatio, ::testing::Values(1, 2, 4));

TEST(Hybrid, FusedExpertTensorsOfTheWrongShapeAreAnErrorNamingThem) {
  TempDir dir;
  Hybrid m = make_hybrid(1);
  write_hybrid(m, dir.path(), false, true);
  // Rewrite with a down_proj of the wrong shape: [E, I, D] instead of [E, D, I].
  io::SafetensorsWriter st;
  for (const auto& [name, t] : m.w)
    if (name.find(".mlp.experts.") == std::string::npos) st.add(name, DType::F32, t.shape, t.v);
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string box = fmt::format("model.layers.{}.mlp.experts", l);
    st.add(box + ".gate_up_proj", DType::F32, {m.experts, 2 * m.inter, m.hidden},
           std::vector<float>(static_cast<size_t>(m.experts * 2 * m.inter * m.hidden), 0.01f));
    st.add(box + ".down_proj", DType::F32, {m.experts, m.inter, m.hidden},
           std::vector<float>(static_cast<size_t>(m.experts * m.inter * m.hidden), 0.01f));
  }
  st.write((dir.path() / "model.safetensors").string());
  try {
    CausalLM::load(dir.path().string(), f32());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("model.layers.0.mlp.experts.down_proj"), std::string::npos) << w;
    EXPECT_NE(w.find("expected shape [4, 32, 16]"), std::string::npos) << w;
  }
}

// Sequences batched in one forward call give the logits each gives alone, bit for bit.
void batched_sequences_equal_each_alone(const Hybrid& m) {
  TempDir dir;
  write_hybrid(m, dir.path());
  LoadOptions lo;
  lo.prefill_chunk = 7;  // steps that mix sequences and split prompts
  auto lm = CausalLM::load(dir.path().string(), f32(), lo);
  const int64_t vocab = lm->vocab_size();
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {9, 8, 7}, {50, 60, 70, 80, 90, 11, 12, 13}};
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) alone.push_back(all_logits(*lm, p));
  std::vector<SequenceState> states;
  for (size_t i = 0; i < prompts.size(); ++i) states.push_back(lm->new_sequence());
  std::vector<std::vector<float>> got(prompts.size());
  std::vector<SequenceChunk> batch;
  for (size_t i = 0; i < prompts.size(); ++i) {
    got[i].resize(prompts[i].size() * vocab);
    batch.push_back({&states[i], prompts[i].data(), static_cast<int64_t>(prompts[i].size()), LogitsMode::all,
                     got[i].data()});
  }
  lm->forward(batch);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], alone[i]) << "sequence " << i;
}

TEST(Hybrid, BatchedSequencesEqualEachAlone) {
  for (Family family : {Family::qwen3_5_moe, Family::qwen3_5}) {
    SCOPED_TRACE(family == Family::qwen3_5 ? "dense" : "moe");
    batched_sequences_equal_each_alone(make_hybrid(2, 11, family));
  }
}

TEST(Hybrid, FailedForwardLeavesTheRecurrentStateAsItWas) {
  TempDir dir;
  Hybrid m = make_hybrid(2);
  write_hybrid(m, dir.path());
  LoadOptions lo;
  lo.prefill_chunk = 2;
  auto lm = CausalLM::load(dir.path().string(), f32(), lo);
  const int64_t vocab = lm->vocab_size();
  SequenceState s = lm->new_sequence();
  std::vector<float> out(vocab);
  lm->forward(s, kTokens.data(), 4, LogitsMode::last, out.data());
  // A token outside the vocabulary after two good steps of this call: Error, state untouched.
  const std::vector<int32_t> bad = {kTokens[4], kTokens[5], kTokens[6], 500};
  EXPECT_THROW(lm->forward(s, bad.data(), 4, LogitsMode::last, out.data()), Error);
  EXPECT_EQ(s.length(), 4);
  std::vector<float> rest((kTokens.size() - 4) * vocab);
  lm->forward(s, kTokens.data() + 4, static_cast<int64_t>(kTokens.size()) - 4, LogitsMode::all, rest.data());
  const auto want = reference(m, kTokens);
  std::vector<Vec> tail(want.begin() + 4, want.end());
  EXPECT_LT(max_rel_diff(rest, tail), 2e-5);
  EXPECT_THROW(s.truncate(2), Error);  // the last call was not rewindable
  s.truncate(0);
  EXPECT_EQ(s.length(), 0);
}

TEST(Hybrid, Bfloat16ActivationsStayCloseToFloat32) {
  TempDir dir;
  Hybrid m = make_hybrid(2);
  write_hybrid(m, dir.path());
  EngineOptions o;
  o.dtype = "bfloat16";
  auto lm = CausalLM::load(dir.path().string(), o);
  const auto got = all_logits(*lm, kTokens);
  const auto want = reference(m, kTokens);
  // bf16 keeps 8 significant bits: a few percent per position, except where rounding flips a
  // router's top-k choice (a discrete jump; one position of this prompt does): at most 2 such.
  int close = 0;
  double worst_close = 0;
  for (size_t t = 0; t < want.size(); ++t) {
    std::vector<float> row(got.begin() + t * m.vocab, got.begin() + (t + 1) * m.vocab);
    const double d = max_rel_diff(row, {want[t]});
    EXPECT_GT(d, 1e-5) << "position " << t;  // bf16 is in effect
    if (d < 0.05) ++close, worst_close = std::max(worst_close, d);
  }
  EXPECT_GE(close, static_cast<int>(want.size()) - 2) << "worst close position " << worst_close;
}

TEST(Hybrid, ConfigErrorsNameTheField) {
  TempDir dir;
  Hybrid m = make_hybrid(2);
  m.config["linear_num_value_heads"] = 3;
  write_hybrid(m, dir.path());
  try {
    CausalLM::load(dir.path().string(), f32());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_num_value_heads"), std::string::npos) << e.what();
  }
  m = make_hybrid(2);
  m.config["layer_types"] = {"linear_attention", "full_attention", "mamba", "full_attention"};
  write_hybrid(m, dir.path());
  EXPECT_THROW(CausalLM::load(dir.path().string(), f32()), Error);
  // GDN dims size the per-sequence state: beyond the limits they are errors naming the field.
  for (const char* key : {"linear_num_value_heads", "linear_key_head_dim", "linear_conv_kernel_dim"}) {
    m = make_hybrid(1);
    m.config[key] = 4096;
    write_hybrid(m, dir.path());
    try {
      CausalLM::load(dir.path().string(), f32());
      ADD_FAILURE() << "expected an error for " << key;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("field '") + key + "' is 4096, more than"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Hybrid, FullAttentionIntervalGivesTheLayerTypes) {
  TempDir dir;
  Hybrid m = make_hybrid(1);
  m.config.erase("layer_types");
  m.config["full_attention_interval"] = 2;  // layers 1 and 3 full, as layer_types said
  write_hybrid(m, dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32());
  EXPECT_EQ(lm->config().gdn.full_attention, (std::vector<bool>{false, true, false, true}));
  EXPECT_LT(max_rel_diff(all_logits(*lm, kTokens), reference(m, kTokens)), 2e-5);
}

// ---- the chunked prefill (model/layers/gated_delta_rule.h) over prompts longer than a block ----

std::vector<int32_t> long_prompt(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 97);
  return t;
}

// Logits [n, vocab] of `toks` fed in forward calls of `call` tokens (0 = one call).
std::vector<float> logits_in_calls(const CausalLM& lm, const std::vector<int32_t>& toks, int64_t call) {
  const int64_t vocab = lm.vocab_size(), n = static_cast<int64_t>(toks.size());
  SequenceState s = lm.new_sequence();
  std::vector<float> out(toks.size() * vocab);
  for (int64_t t = 0; t < n;) {
    const int64_t k = call > 0 ? std::min(call, n - t) : n;
    lm.forward(s, toks.data() + t, k, LogitsMode::all, out.data() + t * vocab);
    t += k;
  }
  return out;
}

// Restores the process-wide settings a test changes.
struct RestoreSettings {
  int threads = ThreadPool::global().size();
  ~RestoreSettings() {
    ThreadPool::set_global_threads(threads);
    gdn::set_prefill_form(gdn::PrefillForm::chunked);
  }
};

class HybridLongPrompt : public ::testing::TestWithParam<int64_t> {};

// 200 tokens: blocks of 64, 64, 64 and a remainder of 8. Prompt at once, token by token (the
// recurrent form only), in forward calls of 1, 3, 64 and 100 tokens, in steps of 64 and 100
// rows, and with the recurrent prefill form: all within float32 rounding of the float64 forward.
TEST_P(HybridLongPrompt, EveryPrefillSplitAndBothFormsMatchFloat64) {
  RestoreSettings restore;
  Hybrid m = make_hybrid(GetParam(), 23);
  const std::vector<int32_t> toks = long_prompt(200, 5);
  const auto want = reference(m, toks);
  TempDir dir;
  write_hybrid(m, dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32());
  const double tol = 2e-5;  // of the logit range; measured ≤ 6e-6 (calls and at once)
  const auto once = logits_in_calls(*lm, toks, 0);
  double worst = max_rel_diff(once, want);
  EXPECT_LT(worst, tol) << "at once";
  for (int64_t call : {1, 3, 64, 100}) {
    const double d = max_rel_diff(logits_in_calls(*lm, toks, call), want);
    EXPECT_LT(d, tol) << "calls of " << call;
    worst = std::max(worst, d);
  }
  RecordProperty("worst_rel_diff", fmt::format("{:.2e}", worst));
  for (int64_t step : {64, 100}) {
    LoadOptions lo;
    lo.prefill_chunk = step;
    auto stepped = CausalLM::load(dir.path().string(), f32(), lo);
    const auto got = logits_in_calls(*stepped, toks, 0);
    EXPECT_LT(max_rel_diff(got, want), tol) << "steps of " << step;
    if (step == 64) {
      EXPECT_EQ(got, once);  // steps cut at block boundaries change nothing
    }
  }
  gdn::set_prefill_form(gdn::PrefillForm::recurrent);
  const auto rec = logits_in_calls(*lm, toks, 0);
  EXPECT_LT(max_rel_diff(rec, want), tol) << "recurrent prefill";
  EXPECT_NE(rec, once);  // the chunked form really ran above
}

INSTANTIATE_TEST_SUITE_P(ValueHeadsPerKeyHead, HybridLongPrompt, ::testing::Values(1, 2, 4));

// Chunked prefills next to decodes: each sequence's logits are bit-identical alone (the same
// forward calls) and in batches, whatever the step size (steps cut only at block boundaries)
// and thread count.
TEST(Hybrid, LongPromptsBatchedEqualEachAloneAtAnyThreadCount) {
  RestoreSettings restore;
  TempDir dir;
  write_hybrid(make_hybrid(2, 31), dir.path());
  const std::vector<std::vector<int32_t>> seqs = {long_prompt(150, 1), long_prompt(75, 2), long_prompt(9, 3)};
  // Per call: (sequence, tokens); the calls of one sequence in order.
  const std::vector<std::vector<std::pair<int, int64_t>>> calls = {
      {{0, 100}, {1, 70}, {2, 4}},
      {{0, 1}, {1, 1}, {2, 5}},
      {{0, 49}, {1, 4}},
  };
  for (int64_t step : {256, 100, 7}) {
    LoadOptions lo;
    lo.prefill_chunk = step;
    auto lm = CausalLM::load(dir.path().string(), f32(), lo);
    const int64_t vocab = lm->vocab_size();
    std::vector<std::vector<float>> want;
    for (int threads : {1, 2}) {
      ThreadPool::set_global_threads(threads);
      // Alone: the same calls, one sequence at a time.
      std::vector<std::vector<float>> alone(seqs.size()), batched(seqs.size());
      for (size_t i = 0; i < seqs.size(); ++i) {
        SequenceState s = lm->new_sequence();
        alone[i].resize(seqs[i].size() * vocab);
        int64_t at = 0;
        for (const auto& call : calls)
          for (const auto& [seq, n] : call)
            if (seq == static_cast<int>(i)) {
              lm->forward(s, seqs[i].data() + at, n, LogitsMode::all, alone[i].data() + at * vocab);
              at += n;
            }
      }
      std::vector<SequenceState> states;
      for (size_t i = 0; i < seqs.size(); ++i) states.push_back(lm->new_sequence()), batched[i].resize(alone[i].size());
      std::vector<int64_t> at(seqs.size(), 0);
      for (const auto& call : calls) {
        std::vector<SequenceChunk> batch;
        for (const auto& [seq, n] : call) {
          batch.push_back({&states[seq], seqs[seq].data() + at[seq], n, LogitsMode::all,
                           batched[seq].data() + at[seq] * vocab});
          at[seq] += n;
        }
        lm->forward(batch);
      }
      for (size_t i = 0; i < seqs.size(); ++i)
        EXPECT_EQ(batched[i], alone[i]) << "sequence " << i << " step " << step << " threads " << threads;
      if (want.empty()) want = alone;
      else EXPECT_EQ(alone, want) << "1 vs 2 threads, step " << step;
    }
  }
}

}  // namespace
}  // namespace fp4lm::model::qwen3_5_moe_test
