// Non-finite values are errors: a NaN/inf in an embedding row, in a layer's input, in the
// residual stream or in the logits stops the forward with one line naming the place, the
// position and the sequence — the same on every backend (each forced in turn, `reference`
// included), quantization and thread count — and leaves every sequence state as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "common/checkpoint_edit.h"
#include "common/paths.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "kernels/registry.h"
#include "model/causal_lm.h"
#include "model/load/finite_check.h"
#include "model/state/sequence_store.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::non_finite_test {
namespace {

using quant::QuantAlgo;
using test::TempDir;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(FiniteCheck, FindsTheFirstNanOrInfAnywhere) {
  std::vector<float> x(1000, 1.0f);
  EXPECT_EQ(first_non_finite(x.data(), x.size()), -1);
  x[999] = -kInf;
  EXPECT_EQ(first_non_finite(x.data(), x.size()), 999);
  x[300] = kNan;
  EXPECT_EQ(first_non_finite(x.data(), x.size()), 300);
  x[300] = std::numeric_limits<float>::max();  // large but finite
  x[999] = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(first_non_finite(x.data(), x.size()), -1);
  x[5] = kInf;
  try {
    check_finite(x.data(), 10, 100, "the input of ", "L");
    FAIL();
  } catch (const NonFiniteError& e) {
    EXPECT_EQ(e.row(), 0);
    EXPECT_STREQ(e.what(), "non-finite value (inf) in the input of L (row 0)");
  }
}

// Writes a Qwen3-MoE checkpoint of `algo` with one tensor element set to `value`.
std::string poisoned(const std::filesystem::path& dir, QuantAlgo algo, const std::string& tensor, int64_t index,
                     float value, const std::string& arch = "Qwen3MoeForCausalLM") {
  synth::SyntheticOptions s;
  s.architecture = arch;
  s.algo = algo;
  s.seed = 4;
  synth::write_synthetic_checkpoint(dir.string(), s);
  bool found = false;
  test::edit_tensors(dir, [&](test::EditedTensor& t) {
    if (t.name != tensor) return true;
    found = true;
    from_f32_n(&value, t.dtype, t.bytes.data() + index * dtype_size(t.dtype), 1);
    return true;
  });
  EXPECT_TRUE(found) << tensor;
  return dir.string();
}

struct Case {
  std::string tensor;
  int64_t index;
  float value;
  std::string where;  // expected place in the message
  bool every_position;  // the poison hits every row (else only the rows of token kPoisonToken)
};

constexpr int32_t kPoisonToken = 7;
const int64_t kHidden = 64;  // synth::SyntheticOptions default

const std::vector<Case> kCases = {
    {"model.embed_tokens.weight", kPoisonToken * kHidden + 3, kNan, "the token embedding", false},
    // inf in a norm weight: the normed row becomes inf/NaN, caught entering the router.
    {"model.layers.1.post_attention_layernorm.weight", 5, kInf, "the input of model.layers.1.mlp.gate", true},
    // NaN in the final norm: caught entering lm_head (only rows whose logits are asked).
    {"model.norm.weight", 0, kNan, "the input of lm_head", true},
    // NaN in the lm_head weights: the logits.
    {"lm_head.weight", 11 * kHidden, kNan, "the logits", true},
};

class NonFiniteTest : public ::testing::TestWithParam<QuantAlgo> {
 protected:
  void TearDown() override {
    ThreadPool::set_global_threads(saved_);
    if (!std::getenv("FP4LM_LOG_LEVEL")) set_log_level("warn");
  }
  int saved_ = ThreadPool::global().size();
};

TEST_P(NonFiniteTest, IsOneClearErrorOnEveryBackendAndThreadCount) {
  if (!std::getenv("FP4LM_LOG_LEVEL")) set_log_level("error");
  int ran = 0;
  for (const Case& c : kCases) {
    TempDir dir;
    const std::string d = poisoned(dir.path(), GetParam(), c.tensor, c.index, c.value);
    std::vector<EngineOptions> configs(1);
    for (const kernels::Backend* b : kernels::all_backends()) {
      if (b->unavailable_reason && !b->unavailable_reason().empty()) continue;
      EngineOptions o;
      (b->kind == kernels::LayerKind::linear ? o.linear_backend : o.moe_backend) = b->name;
      configs.push_back(o);
    }
    if (GetParam() == QuantAlgo::NVFP4) configs.emplace_back().override_activation_dtype = DType::BF16;
    for (const EngineOptions& o : configs) {
      std::unique_ptr<CausalLM> lm;
      try {
        lm = CausalLM::load(d, o);
      } catch (const Error&) {
        continue;  // a forced backend that cannot run this checkpoint
      }
      for (int threads : {1, 2}) {
        ThreadPool::set_global_threads(threads);
        const std::string what = fmt::format("{} {} linear '{}' moe '{}' threads {}", c.tensor,
                                             quant::algo_name(GetParam()), o.linear_backend, o.moe_backend, threads);
        SequenceStore store(*lm);
        const int64_t clean = store.allocate(), bad = store.allocate();
        const std::vector<int32_t> a = {1, 2, 3, 4}, b = {9, 8, kPoisonToken, 6};
        std::vector<float> la(lm->vocab_size()), lb(b.size() * lm->vocab_size());
        std::vector<SequenceChunk> batch = {{&store.get(clean), a.data(), 4, LogitsMode::last, la.data()},
                                            {&store.get(bad), b.data(), 4, LogitsMode::all, lb.data()}};
        try {
          lm->forward(batch);
          ADD_FAILURE() << what << ": no error";
        } catch (const NonFiniteError& e) {
          const std::string msg = e.what();
          EXPECT_NE(msg.find("in " + c.where + " at position "), std::string::npos) << what << ": " << msg;
          EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
          // Rows are in batch order: the first hit is the clean sequence's first row when the
          // poison hits every row, else the poisoned token of the second sequence.
          const int64_t want_entry = c.every_position ? 0 : 1;
          int64_t want_pos = c.every_position ? 0 : 2;
          if (c.where == "the logits" || c.where == "the input of lm_head") want_pos = 3;  // `last` row of entry 0
          EXPECT_EQ(e.batch_index(), want_entry) << what << ": " << msg;
          EXPECT_EQ(e.position(), want_pos) << what << ": " << msg;
          EXPECT_EQ(e.sequence_id(), want_entry == 0 ? clean : bad) << what;
          EXPECT_NE(msg.find(fmt::format("position {} of sequence {}", want_pos, e.sequence_id())), std::string::npos)
              << msg;
        }
        EXPECT_EQ(store.get(clean).length(), 0) << what;
        EXPECT_EQ(store.get(bad).length(), 0) << what;
        ++ran;
      }
    }
  }
  EXPECT_GE(ran, static_cast<int>(kCases.size()) * 2 * 2);  // oracle and reference at least
}

// A layer whose output overflows: caught in the residual stream after that layer.
TEST(NonFinite, ResidualStreamIsCheckedAfterEachLayer) {
  TempDir dir;
  const std::string d =
      poisoned(dir.path(), QuantAlgo::None, "model.layers.0.mlp.down_proj.weight", 0, kInf, "LlamaForCausalLM");
  for (const char* backend : {"", "reference"}) {
    EngineOptions o;
    o.linear_backend = backend;
    auto lm = CausalLM::load(d, o);
    SequenceState s = lm->new_sequence();
    const std::vector<int32_t> t = {1, 2, 3};
    std::vector<float> logits(lm->vocab_size());
    try {
      lm->forward(s, t.data(), 3, LogitsMode::last, logits.data());
      ADD_FAILURE() << "no error";
    } catch (const NonFiniteError& e) {
      EXPECT_EQ(e.where(), "the hidden state after decoder layer 0") << e.what();
      EXPECT_EQ(e.position(), 0);
      EXPECT_NE(std::string(e.what()).find("at position 0 of batch entry 0"), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.length(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Quantizations, NonFiniteTest,
                         ::testing::Values(QuantAlgo::None, QuantAlgo::W4A16_NVFP4, QuantAlgo::NVFP4),
                         [](const auto& info) { return std::string(quant::algo_name(info.param)); });

}  // namespace
}  // namespace fp4lm::model::non_finite_test
