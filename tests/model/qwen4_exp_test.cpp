// Qwen4-Exp (Qwen3.8-Flash-Next) against transformers itself: tiny random checkpoints transformers
// 5.24 built and saved (scripts/make_qwen4_exp_goldens.py, fixtures in tests/model/fixtures/qwen4_exp:
// Qwen4ExpForCausalLM with the sigmoid output gate, and the Qwen4ExpForConditionalGeneration wrapper
// beside a vision tower, fed text): hyper-connection streams, two PLE n-gram layers, gated
// delta-nets, two QSA-indexed attention layers whose selector budget (4 tokens: 2 blocks of 2) the
// 24-token sequence crosses, eos inside it (the n-gram hashes restart). float32 logits within 1e-4
// of the range of transformers' float64 logits at every position, argmax equal: in one forward,
// below the budget, prefill + decode one token at a time; the greedy continuation equal; chunks and
// batches against one forward; the config rules.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "common/paths.h"
#include "core/error.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "model/model_config.h"
#include "model/layers/ngram_embedding.h"
#include "model/layers/torch_topk.h"

namespace fp4lm::model::qwen4_exp_test {
namespace {

using nlohmann::json;

std::string fixture(const std::string& kind) {
  return (test::source_dir() / "tests" / "model" / "fixtures" / "qwen4_exp" / kind).string();
}

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

std::vector<double> read_f64(const std::string& path, size_t n) {
  const std::string raw = test::read_file(path);
  EXPECT_EQ(raw.size(), n * sizeof(double)) << path;
  std::vector<double> v(n);
  std::memcpy(v.data(), raw.data(), std::min(raw.size(), n * sizeof(double)));
  return v;
}

// Max |got - want| over the rows, relative to the range of want; argmax equal per row.
double rel_error(const std::vector<float>& got, const std::vector<double>& want, size_t vocab, const std::string& what) {
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  double diff = 0;
  for (size_t k = 0; k < want.size(); ++k) diff = std::max(diff, std::abs(static_cast<double>(got[k]) - want[k]));
  for (size_t r = 0; r < want.size() / vocab; ++r) {
    const auto g = got.begin() + static_cast<std::ptrdiff_t>(r * vocab);
    const auto w = want.begin() + static_cast<std::ptrdiff_t>(r * vocab);
    EXPECT_EQ(std::max_element(g, g + static_cast<std::ptrdiff_t>(vocab)) - g,
              std::max_element(w, w + static_cast<std::ptrdiff_t>(vocab)) - w)
        << what << ": argmax at position " << r;
  }
  const double rel = diff / (*hi - *lo);
  std::cout << what << ": max |fp4lm f32 - transformers f64| / range = " << fmt::format("{:.2e}", rel) << "\n";
  return rel;
}

class Qwen4Exp : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen4Exp, Float32MatchesTransformersFloat64) {
  const std::string dir = fixture(GetParam());
  const json g = io::read_json_file(dir + "/golden.json");
  const auto toks = g["tokens"].get<std::vector<int32_t>>(), shorts = g["short_tokens"].get<std::vector<int32_t>>();
  const auto vocab = g["vocab"].get<size_t>();
  const std::vector<double> want = read_f64(dir + "/logits.f64", toks.size() * vocab);
  const std::vector<double> want_short = read_f64(dir + "/short_logits.f64", shorts.size() * vocab);

  auto lm = CausalLM::load(dir, f32());
  const ModelConfig& c = lm->config();
  EXPECT_EQ(c.architecture, g["architecture"].get<std::string>());
  const Qwen4ExpConfig& q = c.qwen4_exp;
  EXPECT_EQ(q.ple, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(c.gdn.full_attention, (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(q.hc_count, 3);
  EXPECT_EQ(q.index_budget / q.index_compress_ratio, 2);
  EXPECT_EQ(q.eos_token_id, 2);
  EXPECT_EQ(c.rotary_dim, 8);
  EXPECT_EQ(c.gdn.sigmoid_gate, GetParam() == "text");
  const TensorUsage& u = lm->tensor_usage();
  EXPECT_TRUE(u.unused_model.empty() && u.unused_quantization.empty());
  for (const std::string& n : u.unused_model) ADD_FAILURE() << "unused: " << n;

  EXPECT_LT(rel_error(all_logits(*lm, toks), want, vocab, GetParam() + " one forward"), 1e-4);
  EXPECT_LT(rel_error(all_logits(*lm, shorts), want_short, vocab, GetParam() + " below the budget"), 1e-4);
  for (const size_t prefill : {size_t{1}, size_t{4}, size_t{7}}) {
    SequenceState s = lm->new_sequence();
    std::vector<float> got(toks.size() * vocab);
    lm->forward(s, toks.data(), static_cast<int64_t>(prefill), LogitsMode::all, got.data());
    for (size_t t = prefill; t < toks.size(); ++t)
      lm->forward(s, &toks[t], 1, LogitsMode::last, got.data() + t * vocab);
    EXPECT_LT(rel_error(got, want, vocab, fmt::format("{} prefill {} + decode", GetParam(), prefill)), 1e-4);
  }
}

TEST_P(Qwen4Exp, GreedyDecodeEqualsTransformers) {
  const std::string dir = fixture(GetParam());
  const json g = io::read_json_file(dir + "/golden.json");
  auto lm = CausalLM::load(dir, f32());
  SequenceState s = lm->new_sequence();
  std::vector<int32_t> next = g["prompt"].get<std::vector<int32_t>>(), out;
  std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
  const auto want = g["greedy"].get<std::vector<int32_t>>();
  while (out.size() < want.size()) {
    lm->forward(s, next.data(), static_cast<int64_t>(next.size()), LogitsMode::last, logits.data());
    out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    next = {out.back()};
  }
  EXPECT_EQ(out, want);
}

// Steps of a few rows, and three sequences in one batch, against one forward (within 1e-5 of the
// range: the gated delta-nets' chunked form sums blocks cut at step boundaries in another order;
// bit-equality holds only for steps cut at its 64-row blocks, as for Qwen3.5).
TEST_P(Qwen4Exp, StepsChunksAndBatchesMatchOneForward) {
  const std::string dir = fixture(GetParam());
  const json g = io::read_json_file(dir + "/golden.json");
  const auto toks = g["tokens"].get<std::vector<int32_t>>();
  auto lm = CausalLM::load(dir, f32());
  const std::vector<float> whole = all_logits(*lm, toks);
  const auto [lo_it, hi_it] = std::minmax_element(whole.begin(), whole.end());
  const double range = *hi_it - *lo_it;
  auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
    return d;
  };
  for (const int64_t chunk : {1, 2, 3, 5}) {
    LoadOptions lo;
    lo.prefill_chunk = chunk;
    auto chunked = CausalLM::load(dir, f32(), lo);
    EXPECT_LT(max_diff(all_logits(*chunked, toks), whole) / range, 1e-5) << "prefill_chunk " << chunk;
  }
  LoadOptions lo;
  lo.prefill_chunk = 3;
  auto chunked = CausalLM::load(dir, f32(), lo);
  const std::vector<std::vector<int32_t>> prompts = {toks, {9, 8, 2, 7}, {50, 60, 70, 80, 90, 11}};
  std::vector<SequenceState> states;
  std::vector<std::vector<float>> got(prompts.size());
  std::vector<SequenceChunk> batch;
  const int64_t vocab = lm->vocab_size();
  for (size_t i = 0; i < prompts.size(); ++i) states.push_back(chunked->new_sequence());
  for (size_t i = 0; i < prompts.size(); ++i) {
    got[i].resize(prompts[i].size() * static_cast<size_t>(vocab));
    batch.push_back({&states[i], prompts[i].data(), static_cast<int64_t>(prompts[i].size()), LogitsMode::all,
                     got[i].data()});
  }
  chunked->forward(batch);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_LT(max_diff(got[i], all_logits(*lm, prompts[i])) / range, 1e-5) << "batched sequence " << i;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen4Exp, ::testing::Values("text", "wrapper"));

// transformers' derivations for the default config (seed 1234, vocab 248320, base 20000000).
TEST(Qwen4ExpNGram, MultipliersAndPrimesAsTransformers) {
  EXPECT_EQ(NGramEmbedding::nth_prime_after(28, 1), 29);
  EXPECT_EQ(NGramEmbedding::nth_prime_after(28, 3), 37);
  EXPECT_EQ(NGramEmbedding::nth_prime_after(19999999, 1), 20000003);
  const std::vector<int64_t> m = NGramEmbedding::multipliers(248320, 3, 1, 1234);
  ASSERT_EQ(m.size(), 3u);
  for (const int64_t v : m) {
    EXPECT_EQ(v % 2, 1);
    EXPECT_LT(v, INT64_MAX / 248320);
  }
}

// torch.topk's picks among ties (torch 2.9.1 on the CPU, printed by hand), which the QSA selector
// follows: not the lowest indices.
TEST(Qwen4ExpQsa, TopkBreaksTiesAsTorch) {
  struct Case {
    std::vector<float> v;
    int64_t k;
    std::vector<int32_t> want;
  };
  const std::vector<Case> cases = {
      {{1.25f, 0, 0, 0}, 2, {0, 2}},
      {{0, 0, 0, 0}, 2, {2, 3}},
      {{0, 0, 0, 0.67f}, 2, {3, 2}},
      {{2.9f, 0.1f, 0, 0, 0, 0}, 3, {0, 1, 5}},
      {{0, 0, 0, 1.0f, 2.1f, 0, 0}, 4, {4, 3, 5, 6}},
      {{0.8f, 0, 2.2f, 0, 0, 0.1f, 0, 1.1f}, 5, {2, 7, 0, 5, 6}},
  };
  for (const Case& c : cases) EXPECT_EQ(torch_topk_indices(c.v, c.k), c.want);
}

std::string parse_error(const json& c) {
  try {
    parse_model_config(c, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(parsed)";
}

TEST(Qwen4ExpConfig, Refusals) {
  const json base = io::read_json_file(fixture("text") + "/config.json");
  json c = base;
  c["layer_types"] = {"linear_attention", "full_attention", "linear_attention", "full_attention"};
  EXPECT_EQ(parse_model_config(c, "config.json").gdn.full_attention, (std::vector<bool>{false, true, false, true}));
  auto expect = [&](json cfg, const std::string& msg) {
    EXPECT_NE(parse_error(cfg).find(msg), std::string::npos) << parse_error(cfg);
  };
  c = base;
  c.erase("indexer_budget");
  expect(c, "missing required field 'indexer_budget'");
  c = base;
  c["indexer_kv_heads"] = 2;
  expect(c, "indexer_kv_heads must be 1");
  c = base;
  c["indexer_budget"] = 5;
  expect(c, "indexer_budget (5) must be a multiple of indexer_compress_ratio (2)");
  c = base;
  c["output_gate_type"] = "gelu";
  expect(c, "output_gate_type 'gelu' is not supported");
  c = base;
  c["ple_layer_ids"] = {2};
  expect(c, "ple_layer_ids holds 2, an attention layer");
  c = base;
  c.erase("eos_token_id");
  expect(c, "field 'eos_token_id' must be set");
  c = base;
  c["hc_count"] = 1;
  expect(c, "field 'hc_count' must be > 1");
  c = base;
  c["ple_embed_dim"] = 18;
  expect(c, "ple_embed_dim (18) must be a multiple of the n-gram heads");
}

}  // namespace
}  // namespace fp4lm::model::qwen4_exp_test
