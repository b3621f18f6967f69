// NemotronHForCausalLM (arch/nemotron_h.cpp) against a float64 forward written for this test from
// transformers' NemotronH modeling (one mixer per layer behind one RMSNorm; Mamba-2 with the
// conv over the zero-padded whole sequence and the selective-scan recurrence over all positions;
// attention without RoPE recomputed per position; the relu² MLP), on a tiny random float32
// checkpoint in the published layout (backbone.*, hybrid_override_pattern). Also: prefill in
// steps and decode give the same logits; a Mamba layer's state is a fixed number of bytes per
// sequence whatever its length; config errors name the field; the chunked SSD prefill form
// against the same float64 forward.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/paths.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "model/layers/mamba2_mixer.h"
#include "model/layers/mamba_timing.h"
#include "model/model_config.h"
#include "reference/nemotron_h_reference.h"

namespace fp4lm::model::nemotron_h_test {
namespace {

using test::TinyModel;
using test::naive::Vec;
using test::nemotron::Dims;
using test::nemotron::make_model;
using test::nemotron::reference;

std::vector<int32_t> prompt(size_t n) {
  std::vector<int32_t> t;
  for (size_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((i * 37 + 5) % 97));
  return t;
}

std::unique_ptr<CausalLM> load(const test::TempDir& dir, int64_t prefill_chunk = 256, const char* dtype = "float32") {
  EngineOptions o;
  o.dtype = dtype;
  LoadOptions lo;
  lo.prefill_chunk = prefill_chunk;
  return CausalLM::load(dir.path().string(), o, lo);
}

// float32 engine == float64 reference, in one prefill, in steps of 3 rows, and as a 9-token
// prefill followed by decode steps (the conv window and SSM state carried between calls).
TEST(NemotronH, MatchesFloat64Forward) {
  const Dims d;
  test::TempDir dir;
  const TinyModel m = make_model(d);
  test::write_tiny_model(m, dir.path());
  const std::vector<int32_t> tokens = prompt(21);
  const auto want = reference(m, d, tokens);
  auto lm = load(dir);
  EXPECT_EQ(lm->config().mamba.pattern, d.pattern);
  EXPECT_LT(max_rel_diff(all_logits(*lm, tokens), want), 2e-5);
  EXPECT_LT(max_rel_diff(all_logits(*load(dir, 3), tokens), want), 2e-5);
  EXPECT_LT(max_rel_diff(prefill_then_decode_logits(*lm, tokens, 9, 64), want), 2e-5);
}

// The chunked SSD prefill (chunk_size 8 here, so 21 tokens cross two block boundaries) against
// the same float64 forward, in one prefill, in 3-row and 8-row steps and as prefill + decode;
// steps cut at multiples of chunk_size equal the one prefill bit for bit, and the state bytes
// stay those of the recurrent form.
TEST(NemotronH, ChunkedSsdPrefillMatchesFloat64Forward) {
  struct Form {
    explicit Form(mamba::PrefillForm f) : was(mamba::prefill_form()) { mamba::set_prefill_form(f); }
    ~Form() { mamba::set_prefill_form(was); }
    mamba::PrefillForm was;
  } chunked(mamba::PrefillForm::chunked);
  const Dims d;
  test::TempDir dir;
  const TinyModel m = make_model(d);
  test::write_tiny_model(m, dir.path());
  const std::vector<int32_t> tokens = prompt(21);
  const auto want = reference(m, d, tokens);
  auto lm = load(dir);
  const std::vector<float> one = all_logits(*lm, tokens);
  EXPECT_LT(max_rel_diff(one, want), 2e-5);
  EXPECT_LT(max_rel_diff(all_logits(*load(dir, 3), tokens), want), 2e-5);
  EXPECT_EQ(all_logits(*load(dir, 8), tokens), one) << "steps cut at multiples of chunk_size";
  EXPECT_LT(max_rel_diff(prefill_then_decode_logits(*lm, tokens, 9, 64), want), 2e-5);
  const size_t floats = static_cast<size_t>((d.kconv - 1) * d.conv_dim() + d.mh * d.mp * d.ns);
  for (size_t f : lm->state_layout().recurrent_slots()) EXPECT_EQ(f, floats);
}

// Nemotron 3's MoE layers ('E'): sigmoid routing with the correction bias, two groups of which
// one is chosen, normalized and scaled weights, relu² experts, the shared expert; and the latent
// MoE of Super / Ultra (the routed experts between fc1_latent_proj and fc2_latent_proj).
TEST(NemotronH, MoeAndLatentMoeMatchFloat64Forward) {
  for (int64_t latent : {int64_t{0}, int64_t{12}}) {
    Dims d;
    d.pattern = "ME*EM-";
    d.latent = latent;
    test::TempDir dir;
    const TinyModel m = make_model(d);
    test::write_tiny_model(m, dir.path());
    const std::vector<int32_t> tokens = prompt(15);
    const auto want = reference(m, d, tokens);
    auto lm = load(dir);
    EXPECT_LT(max_rel_diff(all_logits(*lm, tokens), want), 2e-5) << "latent " << latent;
    EXPECT_LT(max_rel_diff(all_logits(*load(dir, 4), tokens), want), 2e-5) << "latent " << latent;
    // Prefill then decode: the experts run on one row at a time.
    EXPECT_LT(max_rel_diff(prefill_then_decode_logits(*lm, tokens, 6, 64), want), 2e-5) << "latent " << latent;
  }
}

// Routing matters: without the correction bias, or without routed_scaling_factor, the logits
// differ from the reference's (which applies both).
TEST(NemotronH, MoeRoutingUsesTheBiasAndTheScaling) {
  Dims d;
  d.pattern = "ME*EM-";
  const TinyModel m = make_model(d);
  const std::vector<int32_t> tokens = prompt(10);
  const auto want = reference(m, d, tokens);
  TinyModel unscaled = m;
  unscaled.config["routed_scaling_factor"] = 1.0;
  TinyModel unbiased = m;
  for (auto& [name, t] : unbiased.w)
    if (name.find("e_score_correction_bias") != std::string::npos) std::fill(t.v.begin(), t.v.end(), 0.0f);
  for (const TinyModel* variant : {&unscaled, &unbiased}) {
    test::TempDir dir;
    test::write_tiny_model(*variant, dir.path());
    EXPECT_GT(max_rel_diff(all_logits(*load(dir), tokens), want), 1e-3);
  }
}

// The time_step_limit clamp matters: with limits no step reaches, the logits differ.
TEST(NemotronH, TimeStepLimitClampsTheStep) {
  Dims d;
  test::TempDir clamped, open;
  const TinyModel m = make_model(d);
  test::write_tiny_model(m, clamped.path());
  TinyModel wide = m;
  wide.config["time_step_limit"] = {0.0, nullptr};  // transformers' default [0, inf]
  wide.config["time_step_min"] = 0.0;  // (else dt is clamped at 0.001, as transformers does)
  test::write_tiny_model(wide, open.path());
  const std::vector<int32_t> tokens = prompt(12);
  d.dt_lo = 0.0, d.dt_hi = std::numeric_limits<double>::infinity();
  const auto want_open = reference(m, d, tokens);
  EXPECT_LT(max_rel_diff(all_logits(*load(open), tokens), want_open), 2e-5);
  EXPECT_GT(max_rel_diff(all_logits(*load(clamped), tokens), want_open), 1e-3);
}

// A model without attention layers: a sequence's state is the Mamba layers' recurrent slots, the
// same bytes for a sequence of 8 or 200 positions: per layer (K-1)·conv_dim + H·P·N floats, two
// buffers (double-buffered state).
TEST(NemotronH, MambaStateIsFixedBytesPerSequence) {
  Dims d;
  d.pattern = "M-M";
  test::TempDir dir;
  test::write_tiny_model(make_model(d), dir.path());
  auto lm = load(dir);
  const size_t floats = static_cast<size_t>((d.kconv - 1) * d.conv_dim() + d.mh * d.mp * d.ns);
  ASSERT_EQ(lm->state_layout().recurrent_slots(), (std::vector<size_t>{floats, floats}));
  EXPECT_TRUE(lm->state_layout().kv_slots().empty());
  const size_t bytes = 2 * 2 * floats * sizeof(float);
  EXPECT_EQ(lm->sequence_bytes(8), bytes);
  EXPECT_EQ(lm->sequence_bytes(200), bytes);
  SequenceState s = lm->new_sequence(200);
  EXPECT_EQ(s.reserved_bytes(), bytes);
  const std::vector<int32_t> tokens = prompt(150);
  std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
  lm->forward(s, tokens.data(), 150, LogitsMode::last, logits.data());
  EXPECT_EQ(s.reserved_bytes(), bytes);
}

// mamba_ssm_cache_dtype bfloat16 keeps the SSM state rounded to bfloat16 between calls: decode
// logits move off the float32 ones, but only by bfloat16 rounding.
TEST(NemotronH, SsmCacheDtypeRoundsTheState) {
  const Dims d;
  test::TempDir dir, bf;
  TinyModel m = make_model(d);
  test::write_tiny_model(m, dir.path());
  m.config["mamba_ssm_cache_dtype"] = "bfloat16";
  test::write_tiny_model(m, bf.path());
  const std::vector<int32_t> tokens = prompt(10);
  const auto want = reference(make_model(d), d, tokens);
  auto decode = [&](const CausalLM& lm) {
    SequenceState s = lm.new_sequence(32);
    std::vector<float> out(tokens.size() * static_cast<size_t>(lm.vocab_size()));
    for (size_t t = 0; t < tokens.size(); ++t)
      lm.forward(s, &tokens[t], 1, LogitsMode::last, out.data() + t * static_cast<size_t>(lm.vocab_size()));
    return out;
  };
  const double f32 = max_rel_diff(decode(*load(dir)), want), b16 = max_rel_diff(decode(*load(bf)), want);
  EXPECT_LT(f32, 2e-5);
  EXPECT_GT(b16, f32);
  EXPECT_LT(b16, 2e-2);
}

nlohmann::json base_config() { return make_model(Dims{}).config; }

void expect_config_error(const nlohmann::json& c, const std::string& needle) {
  try {
    parse_model_config(c, "dir/config.json");
    FAIL() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dir/config.json"), std::string::npos) << e.what();
  }
}

TEST(NemotronH, ConfigErrorsNameTheField) {
  nlohmann::json c = base_config();
  c["hybrid_override_pattern"] = "M*x-M-M";
  expect_config_error(c, "'hybrid_override_pattern' holds 'x'");
  c = base_config();
  c["num_hidden_layers"] = 5;
  expect_config_error(c, "has 7 layers but num_hidden_layers is 5");
  c = base_config();
  c["hybrid_override_pattern"] = "M*-E-M*";
  expect_config_error(c, "missing required field 'n_routed_experts'");
  c["n_routed_experts"] = 6, c["num_experts_per_tok"] = 2, c["moe_intermediate_size"] = 8, c["n_group"] = 4;
  expect_config_error(c, "n_group (4) must split the 6 experts into equal groups of at least 2");
  c["n_group"] = 3, c["topk_group"] = 1, c["num_experts_per_tok"] = 3;
  expect_config_error(c, "num_experts_per_tok (3) exceeds the experts of topk_group=1 groups (2)");
  c["num_experts_per_tok"] = 2, c["moe_latent_size"] = 0;
  expect_config_error(c, "field 'moe_latent_size' must be positive, found 0");
  c["moe_latent_size"] = 100000;
  expect_config_error(c, "field 'moe_latent_size' is 100000, more than the supported maximum 65536");
  c = base_config();
  c["mamba_ssm_cache_dtype"] = "float8";
  expect_config_error(c, "unsupported mamba_ssm_cache_dtype 'float8'");
  c = base_config();
  c["mamba_num_heads"] = 3;
  expect_config_error(c, "mamba_num_heads (3) must be a multiple of n_groups (2)");
  c = base_config();
  c["time_step_limit"] = {1.0, 0.5};
  expect_config_error(c, "'time_step_limit' must hold 0 <= lo < hi");
  c = base_config();
  c["mlp_hidden_act"] = "gelu";
  expect_config_error(c, "unsupported mlp_hidden_act 'gelu'");
  c = base_config();
  c.erase("hybrid_override_pattern");
  expect_config_error(c, "missing required field 'hybrid_override_pattern'");
  // transformers 5's layers_block_type names the same layers.
  c = base_config();
  c.erase("hybrid_override_pattern");
  c["layers_block_type"] = {"mamba", "attention", "mlp", "linear_attention", "mlp", "mamba", "full_attention"};
  EXPECT_EQ(parse_model_config(c, "dir/config.json").mamba.pattern, "M*-M-M*");
  // As transformers 5 saves it: no num_hidden_layers, the time step bound as {"__float__": ...}.
  c.erase("num_hidden_layers");
  c.erase("time_step_min");
  c["time_step_limit"] = {0.0, {{"__float__", "Infinity"}}};
  const ModelConfig t5 = parse_model_config(c, "dir/config.json");
  EXPECT_EQ(t5.num_layers, 7);
  EXPECT_TRUE(std::isinf(t5.mamba.dt_max));
  EXPECT_EQ(t5.mamba.dt_min, 0.001);  // transformers clamps at time_step_min (default 0.001)
  c["time_step_min"] = 0.02;
  EXPECT_EQ(parse_model_config(c, "dir/config.json").mamba.dt_min, 0.02);
  c["time_step_limit"] = {0.0, {{"__float__", "many"}}};
  expect_config_error(c, "'time_step_limit' must be a list of two numbers");
}

}  // namespace
}  // namespace fp4lm::model::nemotron_h_test
