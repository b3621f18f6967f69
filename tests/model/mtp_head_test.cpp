// The MTP head of the Qwen3.5 / Qwen3-Next hybrids (model/layers/mtp_head.h) against a float64 forward
// written from the published math (tests/reference/hybrid_reference.h): the draft logits of every
// family and layout, a second draft fed the head's own output, the head's state across calls,
// and the errors of a checkpoint without a head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/paths.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "reference/hybrid_reference.h"

namespace fp4lm::model::mtp_head_test {
namespace {

using test::TempDir;
using namespace hybrid_ref;

// The head's normed output g for rows (next[i], hidden[i]) at positions 0.. in float64.
std::vector<Vec> mtp_reference(const Hybrid& m, const std::vector<int32_t>& next, const std::vector<Vec>& hidden) {
  std::vector<Vec> u;
  for (size_t i = 0; i < next.size(); ++i) {
    const float* e = m.w.at("model.embed_tokens.weight").v.data() + next[i] * m.hidden;
    Vec a(e, e + m.hidden), b = hidden[i];
    rms_inplace(a.data(), m.hidden, m.w.at("mtp.pre_fc_norm_embedding.weight").v, 1e-6, true);
    rms_inplace(b.data(), m.hidden, m.w.at("mtp.pre_fc_norm_hidden.weight").v, 1e-6, true);
    a.insert(a.end(), b.begin(), b.end());
    u.push_back(dense_matvec(m.w.at("mtp.fc.weight"), a));
  }
  reference_layer(m, m.layers, u);
  for (Vec& y : u) rms_inplace(y.data(), m.hidden, m.w.at("mtp.norm.weight").v, 1e-6, true);
  return u;
}

LoadOptions with_mtp() {
  LoadOptions lo;
  lo.mtp = true;
  lo.progress = false;
  return lo;
}

class MtpFamily : public ::testing::TestWithParam<std::tuple<Family, bool>> {};

TEST_P(MtpFamily, DraftLogitsAndASecondDraftMatchFloat64Forward) {
  const auto [family, vl] = GetParam();
  Hybrid m = make_hybrid(2, 11, family);
  add_mtp(m);
  TempDir dir;
  write_hybrid(m, dir.path(), vl);
  auto lm = CausalLM::load(dir.path().string(), f32(), with_mtp());
  ASSERT_TRUE(lm->has_mtp());
  const int64_t n = static_cast<int64_t>(kTokens.size()), hid = m.hidden, vocab = m.vocab;

  // The target's final normed hidden states, as the forward hands them to the head.
  SequenceState s = lm->new_sequence();
  std::vector<float> logits(n * vocab), hidden(n * hid);
  const SequenceChunk c{&s, kTokens.data(), n, LogitsMode::all, logits.data(), hidden.data()};
  lm->forward(std::span<const SequenceChunk>(&c, 1));
  const std::vector<Vec> want_hidden = reference_hidden(m, kTokens);
  EXPECT_LT(max_rel_diff(hidden, want_hidden), 2e-5);

  // Rows q = 0..n-2: the token after q and the target's hidden state at q.
  SequenceState ms = lm->new_mtp_sequence();
  std::vector<float> draft(vocab), g((n - 1) * hid);
  lm->mtp_forward(ms, kTokens.data() + 1, hidden.data(), n - 1, draft.data(), g.data());
  EXPECT_EQ(ms.length(), n - 1);
  const std::vector<int32_t> next(kTokens.begin() + 1, kTokens.end());
  const std::vector<Vec> want_g = mtp_reference(m, next, std::vector<Vec>(want_hidden.begin(), want_hidden.end() - 1));
  EXPECT_LT(max_rel_diff(g, want_g), 2e-5);
  EXPECT_LT(max_rel_diff(draft, {matvec(m, "lm_head", want_g.back())}), 2e-5);

  // A second draft: the first draft as the token, the head's own output as the hidden state.
  const int32_t d1 = static_cast<int32_t>(std::max_element(draft.begin(), draft.end()) - draft.begin());
  std::vector<float> draft2(vocab);
  lm->mtp_forward(ms, &d1, g.data() + (n - 2) * hid, 1, draft2.data());
  std::vector<int32_t> next2 = next;
  next2.push_back(d1);
  std::vector<Vec> hidden2(want_hidden.begin(), want_hidden.end() - 1);
  hidden2.push_back(want_g.back());
  const std::vector<Vec> want_g2 = mtp_reference(m, next2, hidden2);
  EXPECT_LT(max_rel_diff(draft2, {matvec(m, "lm_head", want_g2.back())}), 2e-5);
}

INSTANTIATE_TEST_SUITE_P(Families, MtpFamily,
                         ::testing::Values(std::tuple{Family::qwen3_5_moe, false}, std::tuple{Family::qwen3_5_moe, true},
                                           std::tuple{Family::qwen3_5, false}, std::tuple{Family::qwen3_next, false}),
                         [](const auto& info) {
                           const Family f = std::get<0>(info.param);
                           return std::string(f == Family::qwen3_5_moe ? "Qwen35Moe"
                                              : f == Family::qwen3_5   ? "Qwen35Dense"
                                                                       : "Qwen3Next") +
                                  (std::get<1>(info.param) ? "VL" : "Flat");
                         });

TEST(MtpHead, RowsSplitOverCallsAndCutBackGiveTheSameDraft) {
  Hybrid m = make_hybrid(2);
  add_mtp(m);
  TempDir dir;
  write_hybrid(m, dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32(), with_mtp());
  const int64_t n = static_cast<int64_t>(kTokens.size()), hid = m.hidden, vocab = m.vocab;
  SequenceState s = lm->new_sequence();
  std::vector<float> hidden(n * hid);
  const SequenceChunk c{&s, kTokens.data(), n, LogitsMode::none, nullptr, hidden.data()};
  lm->forward(std::span<const SequenceChunk>(&c, 1));
  std::vector<float> once(vocab), split(vocab), junk(vocab);
  SequenceState a = lm->new_mtp_sequence(), b = lm->new_mtp_sequence();
  lm->mtp_forward(a, kTokens.data() + 1, hidden.data(), n - 1, once.data());
  // In two calls, with a speculative row written and cut off in between (as the drafter does).
  lm->mtp_forward(b, kTokens.data() + 1, hidden.data(), 5, junk.data());
  lm->mtp_forward(b, kTokens.data() + 9, hidden.data(), 1, junk.data());
  b.truncate(5);
  lm->mtp_forward(b, kTokens.data() + 6, hidden.data() + 5 * hid, n - 6, split.data());
  EXPECT_EQ(once, split);
}

// The rows lm_head reads are normed once: a chunk that also hands the head its input copies them
// from there. Asking for that input changes no logit bit: all rows or the last, a chunk in one
// step or in steps of 3 rows, next to a chunk that does not ask, at float32 and bfloat16.
TEST(MtpHead, AskingForTheHeadsInputChangesNoLogit) {
  Hybrid m = make_hybrid(2);
  add_mtp(m);
  TempDir dir;
  write_hybrid(m, dir.path());
  const int64_t n = static_cast<int64_t>(kTokens.size()), hid = m.hidden, vocab = m.vocab;
  for (const char* dtype : {"float32", "bfloat16"})
    for (int64_t chunk : {256, 3}) {
      EngineOptions o;
      o.dtype = dtype;
      LoadOptions lo = with_mtp();
      lo.prefill_chunk = chunk;
      auto lm = CausalLM::load(dir.path().string(), o, lo);
      for (LogitsMode mode : {LogitsMode::all, LogitsMode::last}) {
        SCOPED_TRACE(std::string(dtype) + ", steps of " + std::to_string(chunk) +
                     (mode == LogitsMode::all ? ", all rows" : ", last row"));
        const size_t size = static_cast<size_t>((mode == LogitsMode::all ? n : 1) * vocab);
        // Alone without the head's input, then batched: first without it, second with it.
        std::vector<float> want(size), first(size), second(size), hidden(static_cast<size_t>(n * hid));
        SequenceState a = lm->new_sequence(), b = lm->new_sequence(), c = lm->new_sequence();
        lm->forward(a, kTokens.data(), n, mode, want.data());
        const SequenceChunk batch[] = {{&b, kTokens.data(), n, mode, first.data()},
                                       {&c, kTokens.data(), n, mode, second.data(), hidden.data()}};
        lm->forward(batch);
        EXPECT_EQ(first, want);
        EXPECT_EQ(second, want);
        EXPECT_NE(hidden, std::vector<float>(hidden.size()));
      }
    }
}

TEST(MtpHead, SequencesBatchedTogetherGiveWhatEachGivesAlone) {
  Hybrid m = make_hybrid(2);
  add_mtp(m);
  TempDir dir;
  write_hybrid(m, dir.path());
  LoadOptions lo = with_mtp();
  lo.prefill_chunk = 8;  // the 12-row entry runs alone in two steps, the others share one
  auto lm = CausalLM::load(dir.path().string(), f32(), lo);
  const int64_t hid = m.hidden, vocab = m.vocab;
  const std::vector<int64_t> ns = {12, 3, 1, 4};
  std::vector<std::vector<float>> hidden, alone_logits, alone_g;
  for (size_t i = 0; i < ns.size(); ++i) {
    hidden.emplace_back(static_cast<size_t>(ns[i] * hid));
    for (size_t j = 0; j < hidden[i].size(); ++j) hidden[i][j] = std::sin(0.37f * static_cast<float>(j + 11 * i));
    SequenceState st = lm->new_mtp_sequence();
    alone_logits.emplace_back(static_cast<size_t>(vocab));
    alone_g.emplace_back(hidden[i].size());
    lm->mtp_forward(st, kTokens.data() + i, hidden[i].data(), ns[i], alone_logits[i].data(), alone_g[i].data());
  }
  std::vector<SequenceState> states;
  for (size_t i = 0; i < ns.size(); ++i) states.push_back(lm->new_mtp_sequence());
  std::vector<std::vector<float>> logits(ns.size(), std::vector<float>(static_cast<size_t>(vocab))), g;
  std::vector<CausalLM::MtpRows> batch;
  for (size_t i = 0; i < ns.size(); ++i) {
    g.emplace_back(hidden[i].size());
    batch.push_back({&states[i], kTokens.data() + i, hidden[i].data(), ns[i], logits[i].data(), g[i].data()});
  }
  lm->mtp_forward(batch);
  for (size_t i = 0; i < ns.size(); ++i) {
    EXPECT_EQ(logits[i], alone_logits[i]) << "sequence " << i;
    EXPECT_EQ(g[i], alone_g[i]) << "sequence " << i;
    EXPECT_EQ(states[i].length(), ns[i]);
  }
}

TEST(MtpHead, ACheckpointWithoutAHeadIsAClearError) {
  TempDir none, broken;
  write_hybrid(make_hybrid(2), none.path());
  try {
    CausalLM::load(none.path().string(), f32(), with_mtp());
    FAIL() << "loaded a head that is not there";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no MTP layers"), std::string::npos) << e.what();
  }
  Hybrid m = make_hybrid(2);
  m.config["mtp_num_hidden_layers"] = 1;  // declared, but no mtp.* tensor written
  write_hybrid(m, broken.path());
  try {
    CausalLM::load(broken.path().string(), f32(), with_mtp());
    FAIL() << "loaded a head without its tensors";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mtp.fc.weight"), std::string::npos) << e.what();
  }
  // Without LoadOptions::mtp the head is never read.
  EXPECT_FALSE(CausalLM::load(broken.path().string(), f32())->has_mtp());
}

}  // namespace
}  // namespace fp4lm::model::mtp_head_test
