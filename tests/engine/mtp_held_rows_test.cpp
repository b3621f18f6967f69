// The MTP drafter (engine/mtp_drafter.h) bounds the target's hidden rows it holds for a sequence
// that is not drafting: through a 40-token prompt prefilled in chunks of 7 and 20 decode steps
// without drafts it holds at most MtpDrafter::kMaxUnreadRows rows after each forward (k + 1 after a
// verify chunk), where it used to hold one per position until the next draft; and the head's K/V
// and drafts are the same bits as those of the drafter before the bound, which had the head read
// every row at the next draft (written out here as Lazy). At float32 and bfloat16.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/paths.h"
#include "engine/causal_lm_step_model.h"
#include "engine/mtp_drafter.h"
#include "model/causal_lm.h"
#include "reference/hybrid_reference.h"

namespace fp4lm::engine::mtp_held_rows_test {
namespace {

using namespace model::hybrid_ref;

constexpr int64_t kK = 3;  // drafts per draft call
constexpr int64_t kCap = 128;

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// The drafter before the bound: every position's row kept until a draft call, which has the head
// read them all at once, then drafts kK tokens, feeding the head its own output.
struct Lazy {
  const model::CausalLM& lm;
  model::SequenceState target, head;
  std::vector<float> hidden;  // the target's normed hidden state of every position
  int64_t read = 0;

  explicit Lazy(const model::CausalLM& m) : lm(m), target(m.new_sequence(kCap)), head(m.new_mtp_sequence(kCap)) {}

  void forward(const int32_t* tokens, int64_t n, bool rewindable) {
    const size_t hid = static_cast<size_t>(lm.config().hidden_size);
    hidden.resize(static_cast<size_t>(target.length() + n) * hid);
    model::SequenceChunk c{&target, tokens, n, model::LogitsMode::none, nullptr};
    c.hidden = hidden.data() + static_cast<size_t>(target.length()) * hid;
    c.rewindable = rewindable;
    lm.forward(std::span<const model::SequenceChunk>(&c, 1));
  }

  std::vector<int32_t> draft(const std::vector<int32_t>& history) {
    const int64_t hid = lm.config().hidden_size, n = target.length() - read;
    std::vector<float> logits(static_cast<size_t>(lm.vocab_size())), g(static_cast<size_t>(n * hid));
    head.truncate(read);
    lm.mtp_forward(head, history.data() + read + 1, hidden.data() + read * hid, n, logits.data(), g.data());
    read = target.length();
    std::vector<int32_t> d{argmax(logits)};
    std::vector<float> last(g.end() - hid, g.end()), next(last.size());
    while (static_cast<int64_t>(d.size()) < kK) {
      lm.mtp_forward(head, &d.back(), last.data(), 1, logits.data(), next.data());
      last.swap(next);
      d.push_back(argmax(logits));
    }
    return d;
  }
};

std::vector<uint8_t> kv_bytes(const model::SequenceState& s) {
  std::vector<uint8_t> b(s.kv().block_bytes(s.length()));
  s.kv().save_rows(0, s.length(), b.data());
  return b;
}

class MtpHeldRows : public ::testing::TestWithParam<std::string> {};

TEST_P(MtpHeldRows, ASequenceNotDraftingHoldsFewRowsAndDraftsTheSameBits) {
  Hybrid m = make_hybrid(2);
  add_mtp(m);
  fp4lm::test::TempDir dir;
  write_hybrid(m, dir.path());
  model::EngineOptions o;
  o.dtype = GetParam();
  model::LoadOptions lo;
  lo.max_model_len = kCap;
  lo.progress = false;
  lo.mtp = true;
  auto lm = model::CausalLM::load(dir.path().string(), o, lo);
  CausalLmStepModel sm(*lm);
  ASSERT_NE(sm.drafter(), nullptr);
  const MtpDrafter& drafter = *sm.drafter();
  const int64_t seq = sm.allocate(kCap);
  Lazy lazy(*lm);

  std::vector<int32_t> toks;  // the sequence's tokens: the target's, and at a draft the next one
  auto next_token = [&] { toks.push_back(static_cast<int32_t>((toks.size() * 37 + 11) % m.vocab)); };
  int64_t most = 0;
  // toks[length, length + n) through the target of both.
  auto run = [&](int64_t n, bool rewindable) {
    const int64_t pos = lazy.target.length();
    StepChunk c;
    c.seq = seq;
    c.tokens = toks.data() + pos;
    c.n = n;
    c.rewindable = rewindable;
    sm.forward(std::span<const StepChunk>(&c, 1));
    lazy.forward(toks.data() + pos, n, rewindable);
    const int64_t held = drafter.held_rows(seq);
    most = std::max(most, held);
    EXPECT_LE(held, rewindable ? std::max(MtpDrafter::kMaxUnreadRows, kK + 1) : MtpDrafter::kMaxUnreadRows)
        << "after position " << pos + n;
  };
  auto draft = [&] {
    EXPECT_EQ(static_cast<int64_t>(toks.size()), lazy.target.length() + 1);
    const StepModel::DraftAsk ask{seq, toks, kK};
    const std::vector<int32_t> got = sm.draft(std::span<const StepModel::DraftAsk>(&ask, 1))[0];
    EXPECT_EQ(got, lazy.draft(toks));
    EXPECT_EQ(drafter.head_state(seq).length(), lazy.head.length());
    EXPECT_TRUE(kv_bytes(drafter.head_state(seq)) == kv_bytes(lazy.head)) << "the head's K/V";
    EXPECT_EQ(drafter.held_rows(seq), 0);
    return got;
  };

  // A 40-token prompt in chunks of 7, then 20 tokens decoded without drafts: 60 positions.
  for (int i = 0; i < 40; ++i) next_token();
  for (int64_t p = 0; p < 40; p += 7) run(std::min<int64_t>(7, 40 - p), false);
  for (int i = 0; i < 20; ++i) next_token(), run(1, false);
  EXPECT_EQ(most, MtpDrafter::kMaxUnreadRows);
  EXPECT_GE(drafter.head_state(seq).length(), 60 - MtpDrafter::kMaxUnreadRows) << "the head read them early";
  next_token();  // the token after the target's last position
  const std::vector<int32_t> d = draft();

  // A verify chunk [that token, the drafts], cut back to its first two rows; 20 more decodes.
  toks.insert(toks.end(), d.begin(), d.end());
  run(kK + 1, true);
  const int64_t keep = lazy.target.length() - kK + 1;
  sm.rewind(seq, keep);
  lazy.target.truncate(keep);
  toks.resize(static_cast<size_t>(keep));
  for (int i = 0; i < 20; ++i) next_token(), run(1, false);
  next_token();
  draft();
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MtpHeldRows, ::testing::Values("float32", "bfloat16"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace fp4lm::engine::mtp_held_rows_test
