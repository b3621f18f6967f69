// MiniMax-M3's text model against transformers itself: tiny random checkpoints transformers 5.24
// built and saved (scripts/make_minimax_m3_goldens.py, fixtures in tests/model/fixtures/minimax_m3:
// MiniMaxM3VLForCausalLM in transformers' names, and the MiniMaxM3SparseForConditionalGeneration
// wrapper in the published layout beside a vision tower, fed text), each with two block-sparse
// layers whose selector budget (6 and 9 positions) the 24-token sequence crosses: float32 logits
// within 1e-4 of the range of transformers' float64 logits at every position, argmax equal, in one
// forward, below the budget, and decoding one token at a time; the greedy continuation equal.
// Then chunks and batches against one forward, and the config rules.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "common/log_capture.h"
#include "common/paths.h"
#include "core/error.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "model/model_config.h"
#include "model/state/state_bytes.h"

namespace fp4lm::model::minimax_m3_test {
namespace {

using nlohmann::json;

std::string fixture(const std::string& kind) {
  return (test::source_dir() / "tests" / "model" / "fixtures" / "minimax_m3" / kind).string();
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

class MiniMaxM3 : public ::testing::TestWithParam<std::string> {};

TEST_P(MiniMaxM3, Float32MatchesTransformersFloat64) {
  const std::string dir = fixture(GetParam());
  const json g = io::read_json_file(dir + "/golden.json");
  const auto toks = g["tokens"].get<std::vector<int32_t>>(), shorts = g["short_tokens"].get<std::vector<int32_t>>();
  const auto vocab = g["vocab"].get<size_t>();
  const std::vector<double> want = read_f64(dir + "/logits.f64", toks.size() * vocab);
  const std::vector<double> want_short = read_f64(dir + "/short_logits.f64", shorts.size() * vocab);

  test::LogCapture log;
  auto lm = CausalLM::load(dir, f32());
  const ModelConfig& c = lm->config();
  EXPECT_EQ(c.architecture, g["architecture"].get<std::string>());
  const MiniMaxM3Config& m = c.minimax_m3;
  EXPECT_EQ(m.sparse, (std::vector<bool>{true, false, true}));
  EXPECT_FALSE(c.layer_is_moe(0));
  EXPECT_TRUE(c.layer_is_moe(1) && c.layer_is_moe(2));
  EXPECT_EQ(c.rotary_dim, 8);  // head_dim 16 × partial_rotary_factor 0.5
  EXPECT_EQ(m.swiglu_limit, 1.5);
  EXPECT_EQ(m.index_heads, 2);
  const bool wrapper = GetParam() == "wrapper";
  EXPECT_EQ(m.original_names, wrapper);
  EXPECT_EQ(m.index_block_size, wrapper ? 3 : 2);
  EXPECT_EQ(m.index_local_blocks, wrapper ? 2 : 1);
  const TensorUsage& u = lm->tensor_usage();
  EXPECT_TRUE(u.unused_model.empty() && u.unused_quantization.empty());
  if (wrapper) {
    EXPECT_EQ(c.wrapper_prefix, "language_model.");
    EXPECT_EQ(log.count("the vision tower (vision_tower.*) and its projectors (multi_modal_projector.*, "
                        "patch_merge_mlp.*) are skipped (text input only)"),
              1)
        << log.text();
    size_t other = 0;
    for (const auto& [why, names] : u.ignored)
      if (std::find(names.begin(), names.end(), "patch_merge_mlp.linear_1.weight") != names.end()) other = names.size();
    EXPECT_GE(other, 25u);  // the tower's layer, patch embedding, norm and both projectors
  }

  // One forward over the whole sequence (past the budget from position 6 / 9 on), and a sequence
  // below it.
  EXPECT_LT(rel_error(all_logits(*lm, toks), want, vocab, GetParam() + " one forward"), 1e-4);
  EXPECT_LT(rel_error(all_logits(*lm, shorts), want_short, vocab, GetParam() + " below the budget"), 1e-4);
  // A 4-token prefill, then one token per step: every step's logits against the same rows.
  EXPECT_LT(rel_error(prefill_then_decode_logits(*lm, toks, 4), want, vocab, GetParam() + " prefill 4 + decode"), 1e-4);
}

TEST_P(MiniMaxM3, GreedyDecodeEqualsTransformers) {
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

TEST_P(MiniMaxM3, StepsChunksAndBatchesMatchOneForward) {
  const json g = io::read_json_file(fixture(GetParam()) + "/golden.json");
  expect_steps_chunks_and_batches_match_one_forward(fixture(GetParam()), f32(), g["tokens"].get<std::vector<int32_t>>());
}

// The RAM estimate `inspect` prints (state_bytes_per_position, state_fixed_bytes) is what a
// sequence holds: per position K and V of 2 KV heads × 16 on each of the 3 layers, plus one
// indexer key of 8 on the 2 block-sparse layers (float32 here); no fixed part.
TEST(MiniMaxM3State, InspectsBytesPerTokenAreWhatASequenceHolds) {
  auto lm = CausalLM::load(fixture("text"), f32());
  ASSERT_EQ(lm->kv_dtype(), DType::F32);
  const size_t per_position = (3 * 2 * 2 * 16 + 2 * 8) * sizeof(float);
  EXPECT_EQ(state_bytes_per_position(lm->state_layout(), lm->kv_dtype()), per_position);
  EXPECT_EQ(state_fixed_bytes(lm->state_layout(), lm->prefill_chunk(), lm->kv_dtype()), 0u);
  const json g = io::read_json_file(fixture("text") + "/golden.json");
  const std::vector<int32_t> toks = g["tokens"].get<std::vector<int32_t>>();
  SequenceState s = lm->new_sequence();
  std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
  lm->forward(s, toks.data(), 10, LogitsMode::last, logits.data());
  EXPECT_EQ(s.used_bytes(), 10 * per_position);
  for (size_t t = 10; t < toks.size(); ++t) lm->forward(s, &toks[t], 1, LogitsMode::last, logits.data());
  EXPECT_EQ(s.used_bytes(), toks.size() * per_position);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MiniMaxM3, ::testing::Values("text", "wrapper"));

std::string parse_error(const json& c) {
  try {
    parse_model_config(c, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(parsed)";
}

// The published config's forms (sparse_attention_config, moe_layer_freq, hidden_act swigluoai)
// read as transformers reads them; bad values name the field.
TEST(MiniMaxM3Config, PublishedFormsAndRefusals) {
  const json base = io::read_json_file(fixture("text") + "/config.json");
  json c = base;
  c.erase("layer_types");
  c.erase("mlp_layer_types");
  c.erase("index_n_heads");
  c["hidden_act"] = "swigluoai";
  c["rotary_dim"] = 8;
  c["sparse_attention_config"] = {{"sparse_attention_freq", {0, 1, 1}}, {"sparse_num_index_heads", 4},
                                  {"sparse_index_dim", 8}, {"sparse_block_size", 5}, {"sparse_topk_blocks", 7},
                                  {"sparse_local_block", 0}};
  c["moe_layer_freq"] = {0, 0, 1};
  c["index_block_size"] = 99;  // the legacy key wins, as in MiniMaxM3VLTextConfig
  const ModelConfig m = parse_model_config(c, "config.json");
  EXPECT_EQ(m.minimax_m3.sparse, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(m.minimax_m3.index_heads, 4);
  EXPECT_EQ(m.minimax_m3.index_block_size, 5);
  EXPECT_EQ(m.minimax_m3.index_topk_blocks, 7);
  EXPECT_EQ(m.minimax_m3.index_local_blocks, 0);
  EXPECT_FALSE(m.layer_is_moe(0) || m.layer_is_moe(1));
  EXPECT_TRUE(m.layer_is_moe(2));
  EXPECT_EQ(m.hidden_act, "silu");

  // transformers rotates head_dim × partial_rotary_factor dims; a disagreeing rotary_dim is said.
  c = base;
  c["rotary_dim"] = 64;
  {
    test::LogCapture log(spdlog::level::warn);
    EXPECT_EQ(parse_model_config(c, "config.json").rotary_dim, 8);
    EXPECT_EQ(log.count("rotary_dim is 64 but partial_rotary_factor gives 8 rotary dims; transformers rotates 8"), 1)
        << log.text();
  }
  c = base;
  c["index_local_blocks"] = 4;  // more forced blocks than kept ones
  EXPECT_NE(parse_error(c).find("index_local_blocks must be in [0, index_topk_blocks = 3], found 4"), std::string::npos)
      << parse_error(c);
  c = base;
  c["layer_types"][1] = "sliding_attention";
  EXPECT_NE(parse_error(c).find("layer_types[1] is 'sliding_attention' (expected 'minimax_m3_sparse' or "
                                "'full_attention')"),
            std::string::npos)
      << parse_error(c);
  c = base;
  c["mlp_layer_types"] = {"dense", "sparse"};
  EXPECT_NE(parse_error(c).find("field 'mlp_layer_types' must list 3 entries"), std::string::npos) << parse_error(c);
  c = base;
  c["hidden_act"] = "gelu";
  EXPECT_NE(parse_error(c).find("unsupported hidden_act 'gelu'"), std::string::npos) << parse_error(c);
  c = base;
  c["index_n_heads"] = 3;
  EXPECT_NE(parse_error(c).find("num_attention_heads (4) is not a multiple of index_n_heads (3)"), std::string::npos)
      << parse_error(c);
  c = base;
  c["index_topk_blocks"] = 0;
  EXPECT_NE(parse_error(c).find("index_topk_blocks"), std::string::npos) << parse_error(c);
  c = base;
  c["rope_parameters"]["partial_rotary_factor"] = 0.1;
  EXPECT_NE(parse_error(c).find("partial_rotary_factor 0.1 gives 1 rotary dims"), std::string::npos) << parse_error(c);
}

}  // namespace
}  // namespace fp4lm::model::minimax_m3_test
