// Beam search (engine/beam_search.h) on a real tiny model through the batching engine, against a
// plain beam search written here over the model's logits (one whole forward per candidate,
// log-softmax in double): the same beams, scores and order, whatever else the engine runs at the
// same time (batch invariance), with length_penalty and EOS completing beams.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "reference/logits_check.h"
#include "reference/tiny_models.h"
#include "common/paths.h"
#include "engine/beam_search.h"
#include "engine/causal_lm_step_model.h"
#include "engine/engine.h"
#include "model/causal_lm.h"

namespace fp4lm::engine::beam_search_test {
namespace {

struct Ref {
  std::vector<int32_t> tokens;
  double cum = 0;
  bool eos = false;
};

double ref_score(size_t prompt_len, const Ref& b, double penalty) {
  double len = static_cast<double>(prompt_len + b.tokens.size()) - (b.eos ? 1 : 0);
  return b.cum / std::pow(len, penalty);
}

// The textbook algorithm (vLLM's LLM.beam_search), written again: nothing shared with the engine.
std::vector<Ref> reference(const model::CausalLM& lm, const std::vector<int32_t>& prompt, size_t width,
                           int64_t max_tokens, double penalty, int32_t eos, bool early = false) {
  const size_t vocab = static_cast<size_t>(lm.vocab_size());
  std::vector<Ref> live(1), done;
  auto by_score = [&](const Ref& a, const Ref& b) {
    return ref_score(prompt.size(), a, penalty) > ref_score(prompt.size(), b, penalty);
  };
  for (int64_t step = 0; step < max_tokens && !live.empty(); ++step) {
    if (early && done.size() >= width) break;
    std::vector<Ref> next;
    for (const Ref& b : live) {
      std::vector<int32_t> seq = prompt;
      seq.insert(seq.end(), b.tokens.begin(), b.tokens.end());
      const std::vector<float> all = model::all_logits(lm, seq);
      const float* row = all.data() + (seq.size() - 1) * vocab;
      double mx = -INFINITY, sum = 0;
      for (size_t t = 0; t < vocab; ++t) mx = std::max(mx, static_cast<double>(row[t]));
      for (size_t t = 0; t < vocab; ++t) sum += std::exp(row[t] - mx);
      std::vector<int32_t> order(vocab);
      for (size_t t = 0; t < vocab; ++t) order[t] = static_cast<int32_t>(t);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t c) { return row[a] > row[c]; });
      for (size_t j = 0; j < 2 * width; ++j) {
        Ref c = b;
        c.tokens.push_back(order[j]);
        c.cum += row[order[j]] - mx - std::log(sum);
        c.eos = order[j] == eos;
        (c.eos ? done : next).push_back(c);
      }
    }
    std::stable_sort(next.begin(), next.end(), by_score);
    if (next.size() > width) next.resize(width);
    live = next;
  }
  done.insert(done.end(), live.begin(), live.end());
  std::stable_sort(done.begin(), done.end(), by_score);
  if (done.size() > width) done.resize(width);
  return done;
}

class BeamSearch : public ::testing::TestWithParam<std::string> {};

TEST_P(BeamSearch, EqualsAPlainBeamSearchOverTheModelsLogitsWhateverElseRuns) {
  fp4lm::test::TempDir dir;
  fp4lm::test::write_tiny_model(fp4lm::test::make_tiny_model(GetParam()), dir.path());
  model::EngineOptions o;
  o.dtype = "float32";
  model::LoadOptions lo;
  lo.max_model_len = 48;
  lo.progress = false;
  auto lm = model::CausalLM::load(dir.path().string(), o, lo);
  CausalLmStepModel sm(*lm);
  SchedulerConfig cfg;
  cfg.max_num_seqs = 8;
  cfg.max_num_batched_tokens = 16;
  cfg.enable_prefix_caching = true;
  cfg.block_size = 4;
  Engine engine(sm, nullptr, cfg);
  const SubmitFn submit = [&](RequestParams p) { return engine.submit(std::move(p)); };
  const std::vector<int32_t> prompt = {5, 17, 3, 40, 41, 9};
  // EOS: the prompt's second most probable next token, so beams complete from the first step on.
  const std::vector<float> first = model::all_logits(*lm, prompt);
  const float* last_row = first.data() + (prompt.size() - 1) * static_cast<size_t>(lm->vocab_size());
  const int32_t top1 = static_cast<int32_t>(
      std::distance(last_row, std::max_element(last_row, last_row + lm->vocab_size())));
  int32_t second = top1 == 0 ? 1 : 0;
  for (int32_t t = 0; t < lm->vocab_size(); ++t)
    if (t != top1 && last_row[t] > last_row[second]) second = t;

  for (const auto& [width, penalty] : std::vector<std::pair<int64_t, double>>{{1, 1.0}, {3, 1.0}, {4, 0.5}, {2, 2.0}}) {
    BeamSearchParams p;
    p.beam_width = width;
    p.max_tokens = 6;
    p.length_penalty = penalty;
    const std::vector<Ref> want = reference(*lm, prompt, static_cast<size_t>(width), p.max_tokens, penalty, second);
    const std::vector<BeamSequence> got = beam_search(submit, prompt, p, {second});
    ASSERT_EQ(got.size(), want.size()) << "width " << width;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "width " << width << " beam " << i;
      EXPECT_EQ(got[i].eos, want[i].eos) << "width " << width << " beam " << i;
      EXPECT_NEAR(got[i].cumulative_logprob, want[i].cum, 1e-4) << "width " << width << " beam " << i;
      EXPECT_NEAR(got[i].score, ref_score(prompt.size(), want[i], penalty), 1e-4);
      ASSERT_EQ(got[i].logprobs.size(), got[i].tokens.size());
      EXPECT_EQ(got[i].logprobs.front().top.size(), static_cast<size_t>(2 * width));
    }
    for (size_t i = 1; i < got.size(); ++i) EXPECT_GE(got[i - 1].score, got[i].score) << "best first";
  }

  // Batch invariance: the same search while other requests decode in the same batches.
  BeamSearchParams p;
  p.beam_width = 3;
  p.max_tokens = 6;
  const std::vector<BeamSequence> alone = beam_search(submit, prompt, p, {second});
  std::vector<std::shared_ptr<RequestHandle>> others;
  for (int i = 0; i < 4; ++i) {
    RequestParams r;
    r.prompt = {static_cast<int32_t>(i + 1), 2, 3, static_cast<int32_t>(7 * i + 4)};
    r.max_tokens = 30;
    r.ignore_eos = true;
    others.push_back(engine.submit(r));
  }
  const std::vector<BeamSequence> busy = beam_search(submit, prompt, p, {second});
  for (auto& h : others) h->cancel();
  ASSERT_EQ(busy.size(), alone.size());
  for (size_t i = 0; i < busy.size(); ++i) {
    EXPECT_EQ(busy[i].tokens, alone[i].tokens) << i;
    EXPECT_EQ(busy[i].cumulative_logprob, alone[i].cumulative_logprob) << i;
  }

  EXPECT_TRUE(std::any_of(alone.begin(), alone.end(), [](const BeamSequence& b) { return b.eos; }) ||
              std::any_of(alone.begin(), alone.end(), [](const BeamSequence& b) { return b.tokens.size() == 6; }));

  // early_stopping ends the search once `width` beams have completed (the reference does the same).
  p.early_stopping = true;
  p.beam_width = 1;
  const std::vector<Ref> early = reference(*lm, prompt, 1, p.max_tokens, 1.0, second, true);
  const std::vector<BeamSequence> got_early = beam_search(submit, prompt, p, {second});
  ASSERT_EQ(got_early.size(), early.size());
  EXPECT_EQ(got_early[0].tokens, early[0].tokens);
  // With ignore_eos no beam completes early: every one runs max_tokens.
  p.early_stopping = false;
  p.beam_width = 3;
  p.ignore_eos = true;
  for (const BeamSequence& b : beam_search(submit, prompt, p, {second})) {
    EXPECT_FALSE(b.eos);
    EXPECT_EQ(b.tokens.size(), 6u);
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, BeamSearch, ::testing::Values("LlamaForCausalLM", "Qwen3MoeForCausalLM"));

TEST(BeamSearchParams, AreValidated) {
  auto param_of = [](BeamSearchParams p, size_t prompt_len) -> std::string {
    try {
      validate_beam_search(p, RequestLimits{32, 16}, prompt_len);
    } catch (const RequestError& e) {
      return e.param;
    }
    return "";
  };
  BeamSearchParams p;
  p.max_tokens = 8;
  EXPECT_EQ(param_of(p, 1), "");
  p.beam_width = 0;
  EXPECT_EQ(param_of(p, 1), "n");
  p.beam_width = kMaxLogprobs / 2 + 1;
  EXPECT_EQ(param_of(p, 1), "n");
  p.beam_width = 2;
  p.max_tokens = 16;
  EXPECT_EQ(param_of(p, 1), "max_tokens");
  p.max_tokens = 15;
  EXPECT_EQ(param_of(p, 1), "");
  p.length_penalty = NAN;
  EXPECT_EQ(param_of(p, 1), "length_penalty");
}

}  // namespace
}  // namespace fp4lm::engine::beam_search_test
