// Prefix caching on real (tiny random) models: a request whose prompt shares a cached prefix
// with an earlier one gives bit-identical logits and tokens to a cold run of it with the cache
// off — dense and MoE attention models, FP8 and 16-bit KV caches, a sliding window whose ring
// wraps, the Qwen3.5-MoE hybrid (its gated delta-nets resume from a saved recurrent state) and
// multi-head latent attention (one latent plane per layer), DeepSeek-V4's bounded caches.
#include <gtest/gtest.h>

#include <cstring>

#include "reference/tiny_models.h"
#include "common/paths.h"
#include "engine/causal_lm_step_model.h"
#include "engine/scheduler.h"
#include "model/causal_lm.h"
#include "reference/hybrid_reference.h"

namespace fp4lm::engine::prefix_cache_models_test {
namespace {

struct Case {
  std::string name;
  std::string arch;      // a tiny_models architecture, or "hybrid"
  std::string dtype = "float32", kv_dtype = "auto";
  int64_t window = 0;         // Mistral: sliding window (the ring wraps with prefill_chunk 4)
  int64_t prefill_chunk = 256;
  int64_t block = 16;
  int64_t shared = 40;        // shared prompt tokens
  int64_t expect_hit = 32;
};

std::unique_ptr<model::CausalLM> load(const Case& c, const fp4lm::test::TempDir& dir) {
  std::string path = dir.path().string();
  if (c.arch == "deepseek_v4") {  // its transformers-built fixture
    path = (fp4lm::test::source_dir() / "tests/model/fixtures/deepseek_v4").string();
  } else if (c.arch == "hybrid") {
    model::hybrid_ref::write_hybrid(model::hybrid_ref::make_hybrid(2), dir.path());
  } else {
    fp4lm::test::TinyModel m = fp4lm::test::make_tiny_model(c.arch);
    if (c.window > 0) m.config["sliding_window"] = c.window;
    fp4lm::test::write_tiny_model(m, dir.path());
  }
  model::EngineOptions o;
  o.dtype = c.dtype;
  o.kv_cache_dtype = c.kv_dtype;
  model::LoadOptions lo;
  lo.max_model_len = 128;
  lo.prefill_chunk = c.prefill_chunk;
  lo.progress = false;
  return model::CausalLM::load(path, o, lo);
}

std::vector<int32_t> prompt(int64_t shared, std::vector<int32_t> tail) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < shared; ++i) p.push_back(static_cast<int32_t>((i * 37 + 11) % 90 + 3));
  p.insert(p.end(), tail.begin(), tail.end());
  return p;
}

struct Result {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  int64_t cached = 0;
};

Result run(Scheduler& s, int64_t id, const std::vector<int32_t>& p) {
  RequestParams r;
  r.prompt = p;
  r.max_tokens = 6;
  r.ignore_eos = true;
  r.logprobs = 5;
  s.add(id, r);
  Result out;
  for (int i = 0; i < 100 && s.has_work(); ++i)
    for (auto& [rid, o] : s.step()) {
      out.tokens.insert(out.tokens.end(), o.token_ids.begin(), o.token_ids.end());
      out.logprobs.insert(out.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      out.cached = o.cached_tokens;
    }
  return out;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

class PrefixCacheModels : public ::testing::TestWithParam<Case> {};

TEST_P(PrefixCacheModels, AHitGivesTheColdRunsLogitsAndTokensBitForBit) {
  const Case& c = GetParam();
  fp4lm::test::TempDir dir;
  auto lm = load(c, dir);
  const std::vector<int32_t> a = prompt(c.shared, {5, 6, 7}), b = prompt(c.shared, {8, 9, 10, 11});

  CausalLmStepModel cold_model(*lm);
  SchedulerConfig off;
  off.max_num_batched_tokens = 64;
  Scheduler cold(cold_model, nullptr, off);
  const Result want = run(cold, 1, b);

  CausalLmStepModel warm_model(*lm);
  SchedulerConfig on = off;
  on.enable_prefix_caching = true;
  on.block_size = c.block;
  Scheduler warm(warm_model, nullptr, on);
  const Result first = run(warm, 1, a);
  EXPECT_EQ(first.cached, 0);
  const Result got = run(warm, 2, b);
  EXPECT_EQ(got.cached, c.expect_hit);
  EXPECT_EQ(warm.prefix_hits(), c.expect_hit);
  ASSERT_EQ(got.tokens, want.tokens);
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  for (size_t t = 0; t < got.logprobs.size(); ++t) {
    EXPECT_TRUE(same_bits(got.logprobs[t].logprob, want.logprobs[t].logprob)) << "token " << t;
    ASSERT_EQ(got.logprobs[t].top.size(), want.logprobs[t].top.size());
    for (size_t k = 0; k < got.logprobs[t].top.size(); ++k) {
      EXPECT_EQ(got.logprobs[t].top[k].first, want.logprobs[t].top[k].first);
      EXPECT_TRUE(same_bits(got.logprobs[t].top[k].second, want.logprobs[t].top[k].second)) << t << "/" << k;
    }
  }
  // A cold run of the first prompt with the cache on equals one with it off (the hybrid's cut at
  // its snapshot point changes nothing).
  Scheduler cold2(cold_model, nullptr, off);
  const Result a_off = run(cold2, 3, a);
  EXPECT_EQ(first.tokens, a_off.tokens);
  ASSERT_EQ(first.logprobs.size(), a_off.logprobs.size());
  for (size_t t = 0; t < first.logprobs.size(); ++t)
    EXPECT_TRUE(same_bits(first.logprobs[t].logprob, a_off.logprobs[t].logprob)) << "token " << t;
}

// The same at the StepModel level on every logit: blocks saved from one sequence and loaded into
// another, then the tail forward, against the whole prompt in one forward.
TEST_P(PrefixCacheModels, LoadedBlocksThenTheTailGiveEveryLogitOfTheColdForward) {
  const Case& c = GetParam();
  fp4lm::test::TempDir dir;
  auto lm = load(c, dir);
  const std::vector<int32_t> b = prompt(c.shared, {8, 9, 10, 11});
  const int64_t n = static_cast<int64_t>(b.size()), hit = c.expect_hit, vocab = lm->vocab_size();
  CausalLmStepModel sm(*lm);
  const PrefixSupport sup = sm.prefix_support(c.block);
  EXPECT_EQ(sup.snapshot_grid > 0, c.arch == "hybrid");
  EXPECT_EQ(sup.max_chunk > 0, c.window > 0);

  std::vector<float> want(static_cast<size_t>(vocab)), got(want.size());
  const int64_t cold = sm.allocate(n + 1);
  StepChunk whole{cold, b.data(), n, want.data()};
  sm.forward(std::span(&whole, 1));

  // The donor computes the prefix in chunks its ring holds, ending at the hit point, and saves
  // each block right after the chunk that completed it, as the scheduler does (a sliding ring
  // holds only its last rows; DeepSeek-V4's blocks also carry compressed entries the loaded
  // sequence reads, however old).
  const int64_t donor = sm.allocate(n + 1);
  std::vector<std::vector<uint8_t>> blocks(static_cast<size_t>(hit / c.block));
  std::vector<uint8_t> state;
  size_t saved = 0;
  for (int64_t at = 0; at < hit;) {
    const int64_t take = std::min(hit - at, sup.max_chunk > 0 ? sup.max_chunk : hit);
    StepChunk ch{donor, b.data() + at, take, nullptr};
    sm.forward(std::span(&ch, 1));
    at += take;
    for (; saved < blocks.size() && static_cast<int64_t>(saved + 1) * c.block <= at; ++saved) {
      const bool last = saved + 1 == blocks.size();
      sm.save_positions(donor, static_cast<int64_t>(saved) * c.block, c.block, blocks[saved],
                        last && sup.snapshot_grid > 0 ? &state : nullptr);
      EXPECT_EQ(blocks[saved].size(), sup.block_bytes);
    }
  }
  EXPECT_EQ(state.size(), sup.state_bytes);
  const int64_t seq = sm.allocate(n + 1);
  std::vector<const std::vector<uint8_t>*> ptrs;
  for (const auto& bl : blocks) ptrs.push_back(&bl);
  sm.load_positions(seq, ptrs, c.block, state.empty() ? nullptr : &state);
  StepChunk tail{seq, b.data() + hit, n - hit, got.data()};
  sm.forward(std::span(&tail, 1));
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  // And one decode step after it.
  const int32_t next = 42;
  StepChunk d1{cold, &next, 1, want.data()}, d2{seq, &next, 1, got.data()};
  sm.forward(std::span(&d1, 1));
  sm.forward(std::span(&d2, 1));
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Architectures, PrefixCacheModels,
    ::testing::Values(Case{"Llama", "LlamaForCausalLM"}, Case{"Qwen3Moe", "Qwen3MoeForCausalLM"},
                      Case{"Qwen2Bf16", "Qwen2ForCausalLM", "bfloat16"},
                      Case{"LlamaFp8Kv", "LlamaForCausalLM", "float32", "fp8", 0, 256, 4, 41, 40},
                      Case{"MistralSlidingRing", "MistralForCausalLM", "float32", "auto", 8, 4, 4, 40, 40},
                      Case{"Qwen35MoeHybrid", "hybrid", "float32", "auto", 0, 256, 16, 70, 64},
                      // MLA: one latent plane per slot (KvSlotShape::key_only)
                      Case{"DeepseekV3Latent", "DeepseekV3ForCausalLM"},
                      Case{"Glm4MoeLiteLatent", "Glm4MoeLiteForCausalLM"},
                      // DeepSeek-V4: window / compressor-row rings (they wrap with prefill_chunk 4)
                      // and strided entry slots (CSA every 4, HCA every 16: a block of 4 pads to one row)
                      Case{"DeepseekV4Bounded", "deepseek_v4", "float32", "auto", 8, 4, 4, 40, 40}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fp4lm::engine::prefix_cache_models_test
