// Speculative decoding on a hybrid reserves each sequence's replay log with it
// (StepModel::speculation_bytes): the rows a (k+1)-row verify chunk makes the recurrent mixers
// log, computed here from the layer shapes of the Qwen3.5 hybrid (gated delta-nets: conv input and
// [b a] per row) and of Nemotron-H (Mamba-2: conv input and dt per row). With it a KV budget fits
// fewer sequences (the scheduler queues the rest), and what the logs hold after real verify steps
// never exceeds what was reserved.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "reference/tiny_models.h"
#include "common/paths.h"
#include "engine/causal_lm_step_model.h"
#include "engine/greedy_request.h"
#include "engine/scheduler.h"
#include "model/causal_lm.h"
#include "reference/hybrid_reference.h"
#include "reference/nemotron_h_reference.h"

namespace fp4lm::engine::replay_log_reservation_test {
namespace {

constexpr int64_t kDrafts = 3;

struct Loaded {
  std::unique_ptr<model::CausalLM> lm;
  size_t row_floats = 0;  // what one verify row makes all recurrent layers log together
};

// The hybrid's gated delta-nets log conv_dim + 2·NV floats per row (conv_dim = 2·NK·DK + NV·DV),
// Nemotron-H's Mamba-2 layers conv_dim + H (conv_dim = H·P + 2·G·N).
Loaded load(const std::string& arch, const fp4lm::test::TempDir& dir) {
  Loaded l;
  model::EngineOptions o;
  o.dtype = "float32";
  if (arch == "hybrid") {
    const model::hybrid_ref::Hybrid m = model::hybrid_ref::make_hybrid(2);
    model::hybrid_ref::write_hybrid(m, dir.path());
    const size_t per = static_cast<size_t>(2 * m.nk * m.dk + m.nv * m.dv + 2 * m.nv);
    l.row_floats = per * static_cast<size_t>(std::count(m.full.begin(), m.full.end(), false));
    EXPECT_EQ(per, 88u);
  } else {
    const fp4lm::test::nemotron::Dims d;
    fp4lm::test::write_tiny_model(fp4lm::test::nemotron::make_model(d), dir.path());
    const size_t per = static_cast<size_t>(d.mh * d.mp + 2 * d.groups * d.ns + d.mh);
    l.row_floats = per * static_cast<size_t>(std::count(d.pattern.begin(), d.pattern.end(), 'M'));
    EXPECT_EQ(per, 76u);
  }
  model::LoadOptions lo;
  lo.max_model_len = 64;
  lo.progress = false;
  l.lm = model::CausalLM::load(dir.path().string(), o, lo);
  return l;
}

SchedulerConfig config(bool speculate, size_t budget = 0) {
  SchedulerConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 32;
  c.kv_cache_bytes = budget;
  if (speculate) {
    c.speculative.method = "ngram";
    c.speculative.num_speculative_tokens = kDrafts;
    c.speculative.prompt_lookup_max = 3;
  }
  return c;
}


// A CausalLmStepModel that notes the most any sequence's replay log held after a forward.
class Watched : public StepModel {
 public:
  explicit Watched(CausalLmStepModel& m) : m_(m) {}
  int64_t vocab_size() const override { return m_.vocab_size(); }
  int64_t max_model_len() const override { return m_.max_model_len(); }
  std::vector<int64_t> eos_ids() const override { return m_.eos_ids(); }
  size_t bytes_for(int64_t capacity) const override { return m_.bytes_for(capacity); }
  int64_t allocate(int64_t capacity) override { return m_.allocate(capacity); }
  void release(int64_t seq) override { m_.release(seq); }
  void forward(std::span<const StepChunk> chunks) override {
    m_.forward(chunks);
    for (const StepChunk& c : chunks) {
      most = std::max(most, m_.replay_log_bytes(c.seq));
      verify_rows = std::max(verify_rows, c.rewindable ? c.n : 0);
    }
  }
  bool can_rewind() const override { return m_.can_rewind(); }
  void rewind(int64_t seq, int64_t length) override { m_.rewind(seq, length); }
  size_t speculation_bytes(int64_t k) const override { return m_.speculation_bytes(k); }
  void save_positions(int64_t seq, int64_t pos0, int64_t n, std::vector<uint8_t>& kv,
                      std::vector<uint8_t>* state) override {
    m_.save_positions(seq, pos0, n, kv, state);
  }
  void load_positions(int64_t seq, std::span<const std::vector<uint8_t>* const> blocks, int64_t block_size,
                      const std::vector<uint8_t>* state) override {
    m_.load_positions(seq, blocks, block_size, state);
  }
  size_t most = 0;
  int64_t verify_rows = 0;  // the longest verify chunk run

 private:
  CausalLmStepModel& m_;
};

class ReplayLogReservation : public ::testing::TestWithParam<std::string> {};

TEST_P(ReplayLogReservation, EachSequenceReservesTheLogOfAFullVerifyChunk) {
  fp4lm::test::TempDir dir;
  const Loaded l = load(GetParam(), dir);
  const size_t log = l.row_floats * (kDrafts + 1) * sizeof(float);
  CausalLmStepModel sm(*l.lm);
  ASSERT_TRUE(sm.can_rewind());
  EXPECT_EQ(sm.speculation_bytes(kDrafts), log);
  EXPECT_EQ(l.lm->state_layout().replay_log_bytes(1), l.row_floats * sizeof(float));
  Scheduler off(sm, nullptr, config(false)), on(sm, nullptr, config(true));
  ASSERT_TRUE(on.speculating());
  EXPECT_EQ(off.sequence_bytes(20), sm.bytes_for(20));
  EXPECT_EQ(on.sequence_bytes(20), sm.bytes_for(20) + log);
  on.add(0, greedy_request({5, 6, 7, 8, 5, 6, 7, 8, 5, 6}, 10));
  on.step();
  EXPECT_EQ(on.kv_reserved_bytes(), sm.bytes_for(20) + log);
}

// A budget of exactly three sequences without the log holds two with it: the third waits (FCFS)
// until one finishes, and the reservation never passes the budget.
TEST_P(ReplayLogReservation, ABudgetFitsFewerSequencesAndTheRestWait) {
  fp4lm::test::TempDir dir;
  const Loaded l = load(GetParam(), dir);
  CausalLmStepModel sm(*l.lm);
  const size_t seq = sm.bytes_for(20), log = sm.speculation_bytes(kDrafts), budget = 3 * seq;
  ASSERT_GT(log, 0u);
  ASSERT_LE(2 * (seq + log), budget) << "the test needs a log of at most half a sequence";
  for (bool speculate : {false, true}) {
    SCOPED_TRACE(speculate ? "speculating" : "not speculating");
    Scheduler s(sm, nullptr, config(speculate, budget));
    for (int64_t i = 0; i < 3; ++i) s.add(i, greedy_request({5, 6, 7, 8, 5, 6, 7, 8, 5, 6}, 10));
    s.step();
    EXPECT_EQ(s.num_running(), speculate ? 2 : 3);
    EXPECT_EQ(s.num_waiting(), speculate ? 1 : 0);
    EXPECT_EQ(s.kv_reserved_bytes(), speculate ? 2 * (seq + log) : 3 * seq);
    int steps = 0, finished = 0;
    while (s.has_work() && ++steps < 200) {
      for (auto& [id, out] : s.step()) {
        EXPECT_NE(out.finish_reason, "error") << out.error;
        finished += out.finished;
      }
      EXPECT_LE(s.kv_reserved_bytes(), budget);
    }
    EXPECT_EQ(finished, 3);
  }
}

// Real verify steps of k + 1 rows: the logs then hold exactly what was reserved, never more.
TEST_P(ReplayLogReservation, TheLogsNeverHoldMoreThanReserved) {
  fp4lm::test::TempDir dir;
  const Loaded l = load(GetParam(), dir);
  CausalLmStepModel sm(*l.lm);
  Watched w(sm);
  Scheduler s(w, nullptr, config(true));
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 6, 7, 8, 5, 6, 7, 8, 5, 6}, {11, 12, 11, 12, 11}, {3, 9, 27, 3, 9, 27, 3, 9}, {40, 41, 42, 43, 44, 40, 41}};
  for (size_t i = 0; i < prompts.size(); ++i) s.add(static_cast<int64_t>(i), greedy_request(prompts[i], 24));
  int steps = 0;
  while (s.has_work() && ++steps < 500)
    for (auto& [id, out] : s.step()) EXPECT_NE(out.finish_reason, "error") << out.error;
  EXPECT_FALSE(s.has_work());
  ASSERT_EQ(w.verify_rows, kDrafts + 1) << "a full verify chunk ran";
  EXPECT_EQ(w.most, sm.speculation_bytes(kDrafts));
}

INSTANTIATE_TEST_SUITE_P(Hybrids, ReplayLogReservation, ::testing::Values("hybrid", "nemotron_h"),
                         [](const auto& info) { return info.param == "hybrid" ? "Qwen35MoeHybrid" : "NemotronH"; });

}  // namespace
}  // namespace fp4lm::engine::replay_log_reservation_test
