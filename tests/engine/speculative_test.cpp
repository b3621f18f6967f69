// Speculative decoding: --speculative-config parsing, n-gram (prompt lookup) drafts, exact
// rejection sampling (Sampler::verify draws what Sampler::sample draws: chi-square against the
// exact distribution), and the scheduler's verify steps on the fake model: greedy tokens equal
// those without speculation in fewer steps, sampled sequences distributed as without it, the
// state rewound past rejected drafts, budget and max_tokens respected.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include <fmt/format.h>

#include "engine/greedy_request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/speculative.h"
#include "fake_step_model.h"

namespace fp4lm::engine::speculative_test {
namespace {

using test::FakeStepModel;

TEST(SpeculativeConfig, ParsesVllmsFieldsAndNamesWhatIsWrong) {
  SpeculativeConfig c = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 5})");
  EXPECT_EQ(c.method, "ngram");
  EXPECT_EQ(c.num_speculative_tokens, 5);
  EXPECT_EQ(c.prompt_lookup_min, 1);
  EXPECT_EQ(c.prompt_lookup_max, 4);
  c = parse_speculative_config(R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":2})");
  EXPECT_EQ(c.prompt_lookup_min, 2);
  EXPECT_EQ(c.prompt_lookup_max, 2);
  auto err = [](const std::string& j) {
    try {
      parse_speculative_config(j);
    } catch (const RequestError& e) {
      EXPECT_EQ(e.param, "speculative_config");
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (const char* name : {"mtp", "qwen3_next_mtp", "qwen3_5_mtp"}) {  // vLLM's spellings of one method
    c = parse_speculative_config(fmt::format(R"({{"method": "{}", "num_speculative_tokens": 2}})", name));
    EXPECT_EQ(c.method, "mtp");
    EXPECT_EQ(c.num_speculative_tokens, 2);
  }
  EXPECT_NE(err(R"({"method": "mtp", "num_speculative_tokens": 2, "prompt_lookup_max": 3})")
                .find("prompt_lookup_max applies to method ngram only"),
            std::string::npos);
  EXPECT_NE(err(R"({"method": "deepseek_mtp", "num_speculative_tokens": 1})").find("'deepseek_mtp' is not supported"),
            std::string::npos);
  EXPECT_NE(err("{").find("not JSON"), std::string::npos);
  EXPECT_NE(err(R"({"method": "eagle", "num_speculative_tokens": 2})").find("method 'eagle' is not supported"),
            std::string::npos);
  EXPECT_NE(err(R"({"method": "ngram"})").find("num_speculative_tokens must be given"), std::string::npos);
  EXPECT_NE(err(R"({"method": "ngram", "num_speculative_tokens": 0})").find("in [1, 16], got 0"), std::string::npos);
  EXPECT_NE(err(R"({"method": "ngram", "num_speculative_tokens": 2, "draft": 1})").find("unknown field 'draft'"),
            std::string::npos);
  EXPECT_NE(err(R"({"method":"ngram","num_speculative_tokens":2,"prompt_lookup_min":3,"prompt_lookup_max":2})")
                .find("prompt_lookup_min (3) must be <= prompt_lookup_max (2)"),
            std::string::npos);
}

TEST(NgramProposer, TheLongestSuffixMatchAndWhatFollowedItsLatestOccurrence) {
  SpeculativeConfig c;
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 3;
  // ... 1 2 3 | 7 8 ... 1 2 3 | 9 ... 2 3: the 3-gram "1 2 3"? the suffix is "2 3" + ...
  const std::vector<int32_t> h = {1, 2, 3, 7, 8, 5, 1, 2, 3, 9, 4, 1, 2, 3};
  // Suffix "1 2 3" occurred at 6 (latest earlier) -> followed by 9 4 1.
  EXPECT_EQ(propose_ngram(h, c, 3), (std::vector<int32_t>{9, 4, 1}));
  EXPECT_EQ(propose_ngram(h, c, 10), (std::vector<int32_t>{9, 4, 1, 2, 3})) << "as far as the history goes";
  // No 3-gram or 2-gram match, a 1-gram one: "5" followed by 6 at 1.
  EXPECT_EQ(propose_ngram(std::vector<int32_t>{4, 5, 6, 7, 8, 5}, c, 2), (std::vector<int32_t>{6, 7}));
  EXPECT_TRUE(propose_ngram(std::vector<int32_t>{1, 2, 3, 4}, c, 2).empty());
  c.prompt_lookup_min = 2;
  EXPECT_TRUE(propose_ngram(std::vector<int32_t>{4, 5, 6, 7, 8, 5}, c, 2).empty()) << "1-grams not allowed";
}

// Chi-square of observed counts against probabilities (cells with p = 0 must be empty).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
  double x2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "cell " << i << " has probability 0";
      continue;
    }
    const double e = p[i] * static_cast<double>(n);
    x2 += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return x2;
}

TEST(SamplerVerify, AcceptsADraftWithItsProbabilityAndOtherwiseDrawsTheRest) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f};
  const int64_t v = 5, n = 40000;
  for (int64_t top_k : {0, 3}) {
    SamplingParams sp;
    sp.temperature = 0.8;
    sp.top_k = top_k;
    // The exact distribution sample() draws from.
    std::vector<double> p(5, 0.0);
    {
      std::vector<int> keep = {0, 1, 2, 3, 4};
      if (top_k == 3) keep = {3, 0, 1};
      double z = 0;
      for (int i : keep) z += p[static_cast<size_t>(i)] = std::exp(logits[static_cast<size_t>(i)] / 0.8);
      for (double& q : p) q /= z;
    }
    for (int32_t draft : {3, 2, 4}) {  // the most probable, a dropped one (top_k 3), another
      Sampler s(sp);
      sp.seed += 1;
      std::vector<int64_t> counts(5, 0);
      for (int64_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.verify(logits.data(), v, draft))];
      // df = 4 (or 2 with top_k 3): the 0.1% critical values are 18.5 and 13.8.
      EXPECT_LT(chi_square(counts, p, n), top_k ? 13.8 : 18.5) << "top_k " << top_k << " draft " << draft;
    }
  }
  SamplingParams greedy;
  Sampler g(greedy);
  EXPECT_EQ(g.verify(logits.data(), v, 3), 3);
  EXPECT_EQ(g.verify(logits.data(), v, 1), 3) << "greedy: the argmax whatever the draft";
}


SchedulerConfig spec_config(int64_t k) {
  SchedulerConfig c;
  c.speculative.method = "ngram";
  c.speculative.num_speculative_tokens = k;
  return c;
}

struct Totals {
  std::map<int64_t, std::vector<int32_t>> tokens;
  int steps = 0;
  StepStats spec;  // summed
};

Totals run_all(Scheduler& s) {
  Totals t;
  while (s.has_work() && t.steps < 1000) {
    for (auto& [id, out] : s.step()) t.tokens[id].insert(t.tokens[id].end(), out.token_ids.begin(), out.token_ids.end());
    ++t.steps;
  }
  return t;
}

TEST(SpeculativeScheduler, GreedyTokensEqualThoseWithoutSpeculationInFewerSteps) {
  // The fake's greedy continuation cycles (t -> 3t+1 mod 32), so once a cycle repeats the n-gram
  // drafts are right; the prompts also plant wrong continuations to reject.
  const std::vector<std::vector<int32_t>> prompts = {{1, 4, 13, 8, 25, 12, 5, 16, 17, 20, 29, 24, 9, 28, 21, 0, 1},
                                                     {1, 4, 13, 30, 16},
                                                     {3, 10, 31, 30, 27, 18, 23, 6, 19, 26, 15, 14, 11, 2, 7, 22}};
  FakeStepModel plain_model;
  Scheduler plain(plain_model, nullptr, SchedulerConfig{});
  for (size_t i = 0; i < prompts.size(); ++i) plain.add(static_cast<int64_t>(i), greedy_request(prompts[i], 40));
  const Totals want = run_all(plain);

  FakeStepModel m;
  StepStats sum;
  SchedulerObserver obs;
  obs.on_step = [&](const StepStats& st) {
    sum.spec_drafts += st.spec_drafts;
    sum.spec_draft_tokens += st.spec_draft_tokens;
    sum.spec_accepted_tokens += st.spec_accepted_tokens;
    sum.generation_tokens += st.generation_tokens;
    for (size_t j = 0; j < st.spec_accepted_per_pos.size(); ++j) {
      if (sum.spec_accepted_per_pos.size() <= j) sum.spec_accepted_per_pos.resize(j + 1);
      sum.spec_accepted_per_pos[j] += st.spec_accepted_per_pos[j];
    }
  };
  Scheduler spec(m, nullptr, spec_config(4), obs);
  EXPECT_TRUE(spec.speculating());
  for (size_t i = 0; i < prompts.size(); ++i) spec.add(static_cast<int64_t>(i), greedy_request(prompts[i], 40));
  const Totals got = run_all(spec);
  EXPECT_EQ(got.tokens, want.tokens);
  for (const auto& [id, t] : got.tokens) EXPECT_EQ(t.size(), 40u);
  EXPECT_LE(got.steps, want.steps / 2) << "most drafts accepted";
  EXPECT_GT(sum.spec_drafts, 0);
  EXPECT_GT(sum.spec_accepted_tokens, 0);
  EXPECT_LT(sum.spec_accepted_tokens, sum.spec_draft_tokens) << "some drafts rejected (the planted ones)";
  EXPECT_EQ(sum.generation_tokens, 120);
  int64_t per_pos = 0;
  for (int64_t a : sum.spec_accepted_per_pos) per_pos += a;
  EXPECT_EQ(per_pos, sum.spec_accepted_tokens);
  ASSERT_GE(sum.spec_accepted_per_pos.size(), 2u);
  EXPECT_GE(sum.spec_accepted_per_pos[0], sum.spec_accepted_per_pos[1]) << "a later position needs the earlier";
  EXPECT_TRUE(m.history.empty()) << "every state released";
}

TEST(SpeculativeScheduler, RejectedDraftsAreRewoundAndTheBudgetAndMaxTokensHold) {
  FakeStepModel m;
  SchedulerConfig c = spec_config(8);
  c.max_num_batched_tokens = 5;  // a decode and at most 4 drafts
  c.max_num_seqs = 1;
  Scheduler s(m, nullptr, c);
  // "4 13" was followed by 7 in the prompt: the draft [7, 4, 13] is wrong after the first token.
  s.add(1, greedy_request({4, 13, 7, 4}, 6));
  s.step();  // prefill; samples 13 -> history ... 4 | 13
  std::vector<int32_t> out;
  while (s.has_work()) {
    for (auto& [id, o] : s.step()) out.insert(out.end(), o.token_ids.begin(), o.token_ids.end());
    for (const auto& [id, n] : s.last_batch()) EXPECT_LE(n, 5);
  }
  EXPECT_EQ(out.size(), 5u) << "6 tokens in all, never more";
  // The fake records every forward's chunk; each verify's history was cut back to the accepted
  // tokens, so the greedy chain continues from the right token (else successor() would differ).
  std::vector<int32_t> want;
  int32_t last = 13;
  for (int i = 0; i < 5; ++i) want.push_back(last = FakeStepModel::successor(last, 32));
  EXPECT_EQ(out, want);
}

TEST(SpeculativeScheduler, SampledSequencesAreDistributedAsWithoutSpeculation) {
  // Vocabulary 4, the next token's distribution depends on the last token; prompts whose n-grams
  // draft the likely continuations. The exact probability of each 3-token continuation is the
  // product of the three next-token distributions: both runs are tested against it.
  const int64_t vocab = 4, n = 6000;
  const std::vector<float> spread = {1.2f, 0.1f, -0.4f, 0.6f};
  auto next_p = [&](int32_t last) {
    std::vector<double> p(4);
    double z = 0;
    for (int64_t t = 0; t < vocab; ++t) z += p[static_cast<size_t>(t)] = std::exp(spread[static_cast<size_t>((t + last) % vocab)]);
    for (double& q : p) q /= z;
    return p;
  };
  const std::vector<int32_t> prompt = {0, 0, 3, 0, 0, 3, 0};
  std::vector<double> exact(64);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      for (int c = 0; c < 4; ++c)
        exact[static_cast<size_t>(a * 16 + b * 4 + c)] = next_p(prompt.back())[a] * next_p(a)[b] * next_p(b)[c];
  for (bool speculate : {false, true}) {
    FakeStepModel m;
    m.vocab = vocab;
    m.spread = spread;
    SchedulerConfig cfg = speculate ? spec_config(3) : SchedulerConfig{};
    cfg.max_num_seqs = 64;
    cfg.max_num_batched_tokens = 512;
    int64_t drafts = 0, accepted = 0;
    SchedulerObserver obs;
    obs.on_step = [&](const StepStats& st) {
      drafts += st.spec_draft_tokens;
      accepted += st.spec_accepted_tokens;
    };
    Scheduler s(m, nullptr, cfg, obs);
    for (int64_t i = 0; i < n; ++i) {
      RequestParams p = greedy_request(prompt, 3);
      p.sampling.temperature = 1.0;
      p.sampling.seed = static_cast<uint64_t>(1000 + i);
      s.add(i, p);
    }
    const Totals t = run_all(s);
    std::vector<int64_t> counts(64, 0);
    for (const auto& [id, toks] : t.tokens) {
      ASSERT_EQ(toks.size(), 3u);
      ++counts[static_cast<size_t>(toks[0] * 16 + toks[1] * 4 + toks[2])];
    }
    // df = 63: the 0.1% critical value is 103.4.
    EXPECT_LT(chi_square(counts, exact, n), 103.4) << (speculate ? "speculative" : "plain");
    if (speculate) {
      EXPECT_GT(drafts, n / 2) << "drafts were verified";
      EXPECT_GT(accepted, 0);
      EXPECT_LT(accepted, drafts);
    }
  }
}

TEST(SpeculativeScheduler, OffForAModelThatCannotRewind) {
  FakeStepModel m;
  m.rewindable = false;
  Scheduler s(m, nullptr, spec_config(4));
  EXPECT_FALSE(s.speculating());
  s.add(1, greedy_request({4, 13, 8, 25, 4, 13}, 8));
  const Totals t = run_all(s);
  EXPECT_EQ(t.tokens.at(1).size(), 8u);
  EXPECT_EQ(t.steps, 8);
}

}  // namespace
}  // namespace fp4lm::engine::speculative_test
