// DeepSeek-V4 against transformers itself: a tiny random DeepseekV4ForCausalLM transformers 5.24
// built (scripts/make_deepseek_v4_goldens.py, fixture in tests/model/fixtures/deepseek_v4, saved
// under DeepSeek's native tensor names), 4 residual streams, sliding window 8, a CSA layer pair
// (every 4 tokens, the indexer keeping 3 entries) and an HCA layer (every 16 tokens), hash-routed
// first layers, and a 40-token prompt crossing all of them. float32 logits within 1e-4 of the range
// of transformers' float64 logits at every position, argmax equal: in one forward, and decoding
// one token at a time / after a prefill. Then the config rules.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/checkpoint_edit.h"
#include "common/error_of.h"
#include "common/paths.h"
#include "core/error.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "model/layers/compressed_attention.h"
#include "model/load/model_loader.h"
#include "reference/logits_check.h"
#include "model/model_config.h"
#include "model/state/state_bytes.h"

namespace fp4lm::model::deepseek_v4_test {
namespace {

using nlohmann::json;

std::string dir() { return (test::source_dir() / "tests" / "model" / "fixtures" / "deepseek_v4").string(); }

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

json golden() { return io::read_json_file(dir() + "/golden.json"); }

std::vector<std::vector<double>> want() {
  const json g = golden();
  return read_f64_rows(dir() + "/logits.f64", g["tokens"].size(), g["logits_cols"].get<size_t>());
}

// Max |got - want| relative to the range of want; every row's argmax equal.
double check_rows(const std::vector<float>& got, const std::vector<std::vector<double>>& w, const std::string& what) {
  if (std::getenv("FP4LM_V4_ROWS"))  // per-position errors, to locate a mismatch
    for (size_t r = 0; r < w.size(); ++r) {
      double d = 0;
      for (size_t v = 0; v < w[r].size(); ++v) d = std::max(d, std::abs(static_cast<double>(got[r * w[r].size() + v]) - w[r][v]));
      std::printf("  row %zu: max abs %.2e\n", r, d);
    }
  return range_rel_diff(got, w, "deepseek_v4", what);
}

std::vector<int32_t> tokens() { return golden()["tokens"].get<std::vector<int32_t>>(); }

TEST(DeepseekV4, OneForwardMatchesTransformersFloat64) {
  auto lm = CausalLM::load(dir(), f32());
  EXPECT_EQ(lm->config().architecture, "DeepseekV4ForCausalLM");
  // The prompt crosses the window (8), the HCA blocks (16) and the CSA top-k budget (3 of 4-token entries).
  ASSERT_GT(tokens().size(), 2u * 16u);
  EXPECT_LT(check_rows(all_logits(*lm, tokens()), want(), "one forward"), 1e-4);
}

TEST(DeepseekV4, DecodeStepsMatchTransformersFloat64) {
  auto lm = CausalLM::load(dir(), f32());
  const std::vector<int32_t> toks = tokens();
  EXPECT_LT(check_rows(prefill_then_decode_logits(*lm, toks, 0), want(), "decode steps"), 1e-4);
  const size_t half = 13;  // mid-window, mid-block
  EXPECT_LT(check_rows(prefill_then_decode_logits(*lm, toks, half), want(), fmt::format("prefill {} + decode", half)),
            1e-4);
}

TEST(DeepseekV4, GreedyTokensMatchTransformers) {
  auto lm = CausalLM::load(dir(), f32());
  std::vector<int32_t> toks = tokens();
  const auto greedy = golden()["greedy"].get<std::vector<int32_t>>();
  const size_t vocab = static_cast<size_t>(lm->vocab_size());
  SequenceState s = lm->new_sequence();
  std::vector<float> logits(vocab);
  lm->forward(s, toks.data(), static_cast<int64_t>(toks.size()), LogitsMode::last, logits.data());
  std::vector<int32_t> got;
  for (size_t i = 0; i < greedy.size(); ++i) {
    const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    got.push_back(t);
    lm->forward(s, &t, 1, LogitsMode::last, logits.data());
  }
  EXPECT_EQ(got, greedy);
}

TEST(DeepseekV4, StepsChunksAndBatchesMatchOneForward) {
  expect_steps_chunks_and_batches_match_one_forward(dir(), f32(), tokens());
}

// The indexer's selection is what the goldens check: with index_topk past every row's entries
// (all causal entries kept) the logits agree before the first row with more than 3 entries
// (position 15: (15 + 1) / 4 = 4) and differ after it.
TEST(DeepseekV4, TheSelectionMatters) {
  test::TempDir tmp;
  test::copy_dir(dir(), tmp.path());
  json c = io::read_json_file(dir() + "/config.json");
  c["index_topk"] = 64;
  test::write_file(tmp / "config.json", c.dump(1));
  const std::vector<int32_t> toks = tokens();
  const std::vector<float> dense = checkpoint_logits(tmp.path().string(), toks, f32());
  const auto w = want();
  const size_t vocab = w[0].size();
  double below = 0, past = 0;
  for (size_t r = 0; r < toks.size(); ++r)
    for (size_t v = 0; v < vocab; ++v) {
      double& d = r < 15 ? below : past;
      d = std::max(d, std::abs(static_cast<double>(dense[r * vocab + v]) - w[r][v]));
    }
  EXPECT_LT(below, 1e-4);
  EXPECT_GT(past, 1e-2);
}

// Every tensor is read (tid2eid, the compressors' ape, hc_head_*, DeepSeek's native names); a
// position adds only its share of the compressed entries: per CSA layer head_dim / 4 (entries) +
// index_head_dim / 4 (the indexer's keys), per HCA layer head_dim / 16 — 2 · (32 + 16) / 4 + 32 / 16
// = 26 floats, where the layers' inputs took 4 · 32.
TEST(DeepseekV4, TensorsAndState) {
  auto lm = CausalLM::load(dir(), f32());
  const TensorUsage& u = lm->tensor_usage();
  EXPECT_TRUE(u.unused_model.empty() && u.unused_quantization.empty() && u.ignored.empty());
  ASSERT_EQ(lm->kv_dtype(), DType::F32);
  EXPECT_EQ(state_bytes_per_position(lm->state_layout(), DType::F32), 26u * sizeof(float));
  EXPECT_EQ(lm->new_sequence().bytes_per_position(), 26u * sizeof(float));
}

// The state after N tokens is what the design bounds it to: rings of a fixed size (each layer's
// window K=V; each compressor's [kv | gate] rows of its unfinished window, CSA also the one
// before) plus one entry per `rate` positions, nothing else. With prefill chunk S = 4 a ring of
// window W holds W - 1 + S rows: the window (8) 11 rows of 32 on every layer; CSA's compressor
// rows of 2 · 64 and its indexer's of 2 · 32, 2 · 4 - 1 + 4 = 11 rows each; HCA's of 2 · 32,
// 16 - 1 + 4 = 19 rows: 4 · 11 · 32 + 2 · 11 · (128 + 64) + 19 · 64 = 6848 floats. Entries: per CSA
// layer 32 + 16 floats per 4 positions, on the HCA layer 32 per 16. Checked after every step
// from 19 tokens (every ring full) to 100.
// inspect's RAM estimate counts the float32 copy of a wo_a that is not NVFP4 (bf16 here): 2 groups
// × 16 rows × (4 heads × 32 / 2) inputs × 4 bytes per layer.
TEST(DeepseekV4, InspectCountsTheFloat32WoA) {
  model::ModelLoader l(io::Checkpoint::open(dir()), {});
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(deepseek_v4_wo_a_float_bytes(l, i), 2u * 16u * 64u * 4u) << i;
}

TEST(DeepseekV4, StateBytesAfterNTokensAreRingsPlusEntries) {
  LoadOptions lo;
  lo.prefill_chunk = 4;
  auto lm = CausalLM::load(dir(), f32(), lo);
  ASSERT_EQ(lm->kv_dtype(), DType::F32);
  const size_t fixed = 4 * 11 * 32 + 2 * 11 * (128 + 64) + 19 * 64;
  EXPECT_EQ(fixed, 6848u);
  auto want_floats = [&](int64_t n) {
    return fixed + 2 * static_cast<size_t>(n / 4) * (32 + 16) + static_cast<size_t>(n / 16) * 32;
  };
  EXPECT_EQ(state_fixed_bytes(lm->state_layout(), lm->prefill_chunk(), DType::F32), fixed * sizeof(float));
  EXPECT_EQ(lm->sequence_bytes(256), want_floats(256) * sizeof(float));
  SequenceState s = lm->new_sequence();
  std::vector<int32_t> toks = tokens();
  while (toks.size() < 100) toks.push_back(static_cast<int32_t>((toks.size() * 37) % 96));
  std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
  lm->forward(s, toks.data(), 19, LogitsMode::last, logits.data());
  EXPECT_EQ(s.used_bytes(), want_floats(19) * sizeof(float));
  for (size_t t = 19; t < toks.size(); ++t) {
    lm->forward(s, &toks[t], 1, LogitsMode::last, logits.data());
    const int64_t n = static_cast<int64_t>(t) + 1;
    ASSERT_EQ(s.used_bytes(), want_floats(n) * sizeof(float)) << n << " tokens";
  }
  // 100 tokens: 6848 + 2 · 25 · 48 + 6 · 32 = 9440 floats, where the layers' inputs took 4 · 32 · 100.
  EXPECT_EQ(s.used_bytes(), 9440u * sizeof(float));
}

// Prefill of every length that matters (inside / at / past the window of 8, the CSA blocks of 4
// and the HCA blocks of 16), then one token at a time: transformers' float64 logits at every
// position, through the rings and the entries alone; and prefills cut into steps of 3, 5 and 16.
TEST(DeepseekV4, PrefillThenDecodeAtEverySplitMatchesTransformers) {
  auto lm = CausalLM::load(dir(), f32());
  const std::vector<int32_t> toks = tokens();
  const auto w = want();
  for (size_t split : {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 20, 31, 32, 33, 39})
    EXPECT_LT(check_rows(prefill_then_decode_logits(*lm, toks, split), w, fmt::format("prefill {} + decode", split)),
              1e-4);
  for (int64_t chunk : {3, 5, 16}) {
    LoadOptions lo;
    lo.prefill_chunk = chunk;
    auto c = CausalLM::load(dir(), f32(), lo);
    EXPECT_LT(check_rows(all_logits(*c, toks), w, fmt::format("steps of {}", chunk)), 1e-4);
    EXPECT_LT(check_rows(prefill_then_decode_logits(*c, toks, 21), w, fmt::format("steps of {}, decode", chunk)),
              1e-4);
  }
}

// Speculative decoding's rewind: drafts that complete a CSA entry (position 31) and an HCA entry
// (31) with the wrong tokens, cut back to 30, then the right tokens: the rows the golden says
// (the stale entries are rewritten when their windows complete again).
TEST(DeepseekV4, RewindRewritesTheEntriesItCut) {
  auto lm = CausalLM::load(dir(), f32());
  ASSERT_TRUE(lm->state_layout().can_rewind());
  const std::vector<int32_t> toks = tokens();
  const size_t vocab = static_cast<size_t>(lm->vocab_size());
  std::vector<float> got(toks.size() * vocab), junk(6 * vocab);
  SequenceState s = lm->new_sequence();
  lm->forward(s, toks.data(), 30, LogitsMode::all, got.data());
  const std::vector<int32_t> drafts = {5, 5, 5, 5, 5, 5};
  lm->forward(s, drafts.data(), 6, LogitsMode::all, junk.data());
  s.truncate(30);
  for (size_t t = 30; t < toks.size(); ++t) lm->forward(s, &toks[t], 1, LogitsMode::last, got.data() + t * vocab);
  EXPECT_LT(check_rows(got, want(), "prefill 30, 6 drafts cut, decode"), 1e-4);
}

// Prefix caching's copy, as the engine makes it: with prefill steps of 8 (rings of 7 + 8 rows,
// the CSA / HCA compressor rows' of 8 - 1 + 8 and 16 - 1 + 8) each block of 12 positions is saved
// right after the call that computed it (the rings still hold it); 12 is not a multiple of the
// HCA rate 16, so a block carries 0 or 1 of its entries, padded to one. Loaded into a new
// sequence, which resumes at 36 and decodes the rest: the goldens.
TEST(DeepseekV4, PrefixBlocksCarryRingsAndEntries) {
  LoadOptions lo;
  lo.prefill_chunk = 8;
  auto lm = CausalLM::load(dir(), f32(), lo);
  const std::vector<int32_t> toks = tokens();
  const size_t vocab = static_cast<size_t>(lm->vocab_size());
  std::vector<float> got(toks.size() * vocab);
  SequenceState a = lm->new_sequence();
  const int64_t block = 12;
  // 4 · 12 · 32 (window rows) + 2 · 12 · (128 + 64) + 12 · 64 (compressor rows) + 2 · 3 · 48 + 1 · 32 (entries).
  EXPECT_EQ(a.kv().block_bytes(block), (4u * 12 * 32 + 2 * 12 * 192 + 12 * 64 + 2 * 3 * 48 + 32) * sizeof(float));
  std::vector<std::vector<uint8_t>> blocks(3, std::vector<uint8_t>(a.kv().block_bytes(block)));
  for (int64_t b = 0; b < 3; ++b) {
    lm->forward(a, toks.data() + b * block, block, LogitsMode::all, got.data() + static_cast<size_t>(b * block) * vocab);
    a.kv().save_rows(b * block, block, blocks[static_cast<size_t>(b)].data());
  }
  EXPECT_FALSE(a.kv().holds(0));  // the rings wrapped: block 0 could not be saved now
  SequenceState s = lm->new_sequence();
  for (int64_t b = 0; b < 3; ++b) s.kv().load_rows(b * block, block, blocks[static_cast<size_t>(b)].data(), 36);
  s.resume_at(36, nullptr);
  for (size_t t = 36; t < toks.size(); ++t) lm->forward(s, &toks[t], 1, LogitsMode::last, got.data() + t * vocab);
  EXPECT_LT(check_rows(got, want(), "prefix blocks of 12, resume at 36"), 1e-4);
}

// transformers' save_pretrained form (model.layers.N.attn.*, model.embed_tokens.weight,
// model.norm.weight, model.hc_head.hc_fn, head.weight) loads to the same logits.
TEST(DeepseekV4, TransformersSavedNamesLoadToo) {
  test::TempDir tmp;
  test::copy_dir(dir(), tmp.path());
  test::edit_tensors(tmp.path(), [](test::EditedTensor& t) {
    if (t.name == "embed.weight") t.name = "model.embed_tokens.weight";
    else if (t.name.rfind("hc_head_", 0) == 0) t.name = "model.hc_head.hc_" + t.name.substr(8);
    else if (t.name != "head.weight") t.name = "model." + t.name;
    return true;
  });
  auto lm = CausalLM::load(tmp.path().string(), f32());
  EXPECT_TRUE(lm->tensor_usage().unused_model.empty());
  EXPECT_EQ(all_logits(*lm, tokens()), all_logits(*CausalLM::load(dir(), f32()), tokens()));
}

// Pipeline stages carry the hc_mult streams across a cut ([m, hc_mult, hidden] per step): stages
// [0, 2) and [2, 4) give the whole model's logits bit for bit, prompt then decode steps.
TEST(DeepseekV4, PipelineStagesCarryTheStreams) {
  struct Link final : StageLink {
    std::vector<float> h;
    std::vector<uint8_t> extra;
    int64_t width = 0;
    void receive(float* out, int64_t rows, int64_t hidden, std::vector<uint8_t>& e) override {
      ASSERT_EQ(h.size(), static_cast<size_t>(rows * hidden));
      std::copy(h.begin(), h.end(), out);
      e = extra;
    }
    void send(const float* in, int64_t rows, int64_t hidden, std::span<const uint8_t> e) override {
      width = hidden;
      h.assign(in, in + rows * hidden);
      extra.assign(e.begin(), e.end());
    }
  };
  const auto whole = CausalLM::load(dir(), f32());
  LoadOptions a, b;
  a.first_layer = 0;
  a.end_layer = 2;
  b.first_layer = 2;
  b.end_layer = 4;
  const auto s0 = CausalLM::load(dir(), f32(), a), s1 = CausalLM::load(dir(), f32(), b);
  EXPECT_EQ(s0->weight_bytes() + s1->weight_bytes(), whole->weight_bytes());
  const std::vector<int32_t> toks = tokens();
  const size_t vocab = static_cast<size_t>(whole->vocab_size());
  SequenceState w = whole->new_sequence(), q0 = s0->new_sequence(), q1 = s1->new_sequence();
  Link link;
  for (const auto& [from, n] : {std::pair<size_t, size_t>{0, 30}, {30, 1}, {31, 9}}) {
    std::vector<float> want(n * vocab), got(n * vocab, -1.0f);
    SequenceChunk cw{&w, toks.data() + from, static_cast<int64_t>(n), LogitsMode::all, want.data()};
    whole->forward(std::span(&cw, 1));
    SequenceChunk c0{&q0, toks.data() + from, static_cast<int64_t>(n), LogitsMode::none, nullptr};
    s0->forward(std::span(&c0, 1), &link);
    EXPECT_EQ(link.width, 4 * whole->config().hidden_size);
    SequenceChunk c1{&q1, toks.data() + from, static_cast<int64_t>(n), LogitsMode::all, got.data()};
    s1->forward(std::span(&c1, 1), &link);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << "rows from " << from;
  }
}

TEST(DeepseekV4, ConfigReadsLegacyKeysAndRefusesByName) {
  const json base = io::read_json_file(dir() + "/config.json");
  ModelConfig m = parse_model_config(base, "config.json");
  const DeepseekV4Config& v = m.deepseek_v4;
  using A = DeepseekV4Config::Attn;
  EXPECT_EQ(v.attn, (std::vector<A>{A::sliding, A::csa, A::hca, A::csa}));
  EXPECT_EQ(v.hash_moe, (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(v.csa_rate, 4);
  EXPECT_EQ(v.hca_rate, 16);
  EXPECT_EQ(v.rope_dim, 8);
  EXPECT_EQ(v.compress_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(v.compress_scaling.attention_factor, 1.0);
  EXPECT_DOUBLE_EQ(v.compress_theta, 160000.0);
  EXPECT_TRUE(v.main_scaling.type.empty());
  // DeepSeek's own (legacy) keys, as transformers folds them in.
  json c = base;
  for (const char* k : {"layer_types", "mlp_layer_types", "compress_rates", "partial_rotary_factor"}) c.erase(k);
  c["compress_ratios"] = {0, 4, 128, 4};
  c["num_hash_layers"] = 1;
  c["compress_rate_hca"] = 16;
  c["qk_rope_head_dim"] = 8;
  c["rope_parameters"] = nullptr;
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}};
  m = parse_model_config(c, "config.json");
  EXPECT_EQ(m.deepseek_v4.attn, (std::vector<A>{A::sliding, A::csa, A::hca, A::csa}));
  EXPECT_EQ(m.deepseek_v4.hash_moe, (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(m.deepseek_v4.hca_rate, 16);
  EXPECT_EQ(m.deepseek_v4.rope_dim, 8);
  EXPECT_EQ(m.deepseek_v4.compress_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(m.deepseek_v4.compress_scaling.attention_factor, 1.0);
  auto error = [&](const char* key, const json& val) {
    json e = base;
    e[key] = val;
    return test::error_of([&] { parse_model_config(e, "config.json"); });
  };
  EXPECT_NE(error("scoring_func", "softmax").find("scoring_func 'softmax' is not supported"), std::string::npos);
  EXPECT_NE(error("n_shared_experts", 2).find("n_shared_experts 2 is not supported"), std::string::npos);
  EXPECT_NE(error("num_key_value_heads", 2).find("num_key_value_heads must be 1, found 2"), std::string::npos);
  EXPECT_NE(error("layer_types", {"sliding_attention", "full_attention", "sliding_attention", "sliding_attention"})
                .find("layer_types[1] is \"full_attention\""),
            std::string::npos);
  EXPECT_NE(error("mlp_layer_types", {"moe", "dense", "moe", "moe"}).find("mlp_layer_types[1] is \"dense\""),
            std::string::npos);
  EXPECT_NE(error("o_groups", 3).find("o_groups (3) must divide"), std::string::npos);
}

}  // namespace
}  // namespace fp4lm::model::deepseek_v4_test
