// Cutting a recurrent state back inside a rewindable forward call (speculative decoding's verify
// chunk; SequenceState::truncate replays the kept rows): on the Qwen3.5-MoE hybrid (gated
// delta-nets + attention) and on Nemotron-H (Mamba-2 + attention), a prefill, a 5-row rewindable
// forward cut back to keep 0..5 of its rows, then more tokens decoded must give the logits and
// recurrent state bytes, bit for bit, of a sequence that only ever decoded the kept tokens one at
// a time. Also: the verify rows' logits equal those decodes', and what truncate still refuses.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/paths.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "reference/hybrid_reference.h"
#include "model/layers/mamba_timing.h"
#include "reference/nemotron_h_reference.h"

namespace fp4lm::model::recurrent_rewind_test {
namespace {

const std::vector<int32_t> kPrefix = {1, 17, 5, 96, 40, 40, 3};
const std::vector<int32_t> kVerify = {62, 11, 80, 29, 7};
const std::vector<int32_t> kMore = {50, 8, 33};

struct Run {
  std::vector<float> verify_rows;  // [kept, vocab]: the logits of the kept verify rows
  std::vector<uint8_t> state;      // the recurrent state after the kept rows
  std::vector<float> more;         // [kMore, vocab]: the logits decoding kMore after them
  int64_t length = 0;
};

std::vector<uint8_t> saved(const SequenceState& s) {
  std::vector<uint8_t> b(s.recurrent_floats() * sizeof(float));
  s.save_recurrent(b.data());
  return b;
}

void decode_more(const CausalLM& lm, SequenceState& s, Run& r) {
  const size_t vocab = static_cast<size_t>(lm.vocab_size());
  r.state = saved(s);
  r.length = s.length();
  r.more.resize(kMore.size() * vocab);
  for (size_t t = 0; t < kMore.size(); ++t) lm.forward(s, &kMore[t], 1, LogitsMode::last, r.more.data() + t * vocab);
}

// Prefill, the rewindable 5-row forward, truncate to keep `keep` of its rows, decode kMore.
Run rewound(const CausalLM& lm, int64_t keep) {
  const size_t vocab = static_cast<size_t>(lm.vocab_size());
  SequenceState s = lm.new_sequence(32);
  std::vector<float> last(vocab), all(kVerify.size() * vocab);
  lm.forward(s, kPrefix.data(), static_cast<int64_t>(kPrefix.size()), LogitsMode::last, last.data());
  SequenceChunk c{&s, kVerify.data(), static_cast<int64_t>(kVerify.size()), LogitsMode::all, all.data()};
  c.rewindable = true;
  lm.forward(std::span<const SequenceChunk>(&c, 1));
  s.truncate(static_cast<int64_t>(kPrefix.size()) + keep);
  Run r;
  r.verify_rows.assign(all.begin(), all.begin() + keep * static_cast<int64_t>(vocab));
  decode_more(lm, s, r);
  return r;
}

// The same prefill, then only the kept tokens, one at a time, then kMore.
Run decoded(const CausalLM& lm, int64_t keep) {
  const size_t vocab = static_cast<size_t>(lm.vocab_size());
  SequenceState s = lm.new_sequence(32);
  std::vector<float> last(vocab);
  lm.forward(s, kPrefix.data(), static_cast<int64_t>(kPrefix.size()), LogitsMode::last, last.data());
  Run r;
  r.verify_rows.resize(static_cast<size_t>(keep) * vocab);
  for (int64_t t = 0; t < keep; ++t)
    lm.forward(s, &kVerify[static_cast<size_t>(t)], 1, LogitsMode::last,
               r.verify_rows.data() + static_cast<size_t>(t) * vocab);
  decode_more(lm, s, r);
  return r;
}

// (Empty vectors are equal: memcmp must not see their null data().)
bool same_bytes(const auto& a, const auto& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
}

void expect_rewinds_exactly(const CausalLM& lm) {
  ASSERT_TRUE(lm.state_layout().can_rewind());
  for (int64_t keep = 0; keep <= static_cast<int64_t>(kVerify.size()); ++keep) {
    SCOPED_TRACE("keep " + std::to_string(keep));
    const Run got = rewound(lm, keep), want = decoded(lm, keep);
    EXPECT_EQ(got.length, static_cast<int64_t>(kPrefix.size()) + keep);
    EXPECT_EQ(got.length, want.length);
    EXPECT_TRUE(same_bytes(got.verify_rows, want.verify_rows)) << "verify rows differ from decoding them";
    EXPECT_TRUE(same_bytes(got.state, want.state)) << "recurrent state after the cut";
    EXPECT_TRUE(same_bytes(got.more, want.more)) << "logits decoded after the cut";
  }
  // Not a vacuous comparison: the state does move with the rows kept.
  EXPECT_FALSE(same_bytes(decoded(lm, 1).state, decoded(lm, 2).state));
}

std::unique_ptr<CausalLM> load_hybrid(const test::TempDir& dir, int64_t prefill_chunk) {
  hybrid_ref::write_hybrid(hybrid_ref::make_hybrid(2), dir.path());
  LoadOptions lo;
  lo.prefill_chunk = prefill_chunk;
  lo.max_model_len = 64;
  lo.progress = false;
  return CausalLM::load(dir.path().string(), hybrid_ref::f32(), lo);
}

std::unique_ptr<CausalLM> load_nemotron(const test::TempDir& dir, const char* ssm_cache_dtype = nullptr) {
  test::TinyModel m = test::nemotron::make_model(test::nemotron::Dims{});
  if (ssm_cache_dtype) m.config["mamba_ssm_cache_dtype"] = ssm_cache_dtype;
  test::write_tiny_model(m, dir.path());
  EngineOptions o;
  o.dtype = "float32";
  LoadOptions lo;
  lo.max_model_len = 64;
  lo.progress = false;
  return CausalLM::load(dir.path().string(), o, lo);
}

// The gated delta-nets prefill in the chunked form; the verify rows run recurrent and replay.
TEST(RecurrentRewind, HybridEqualsDecodingTheKeptTokens) {
  test::TempDir dir;
  expect_rewinds_exactly(*load_hybrid(dir, 256));
}

// Steps of 2 rows: the 5-row verify chunk runs in three steps, its log filled across them.
TEST(RecurrentRewind, HybridVerifyChunkSplitAcrossSteps) {
  test::TempDir dir;
  expect_rewinds_exactly(*load_hybrid(dir, 2));
}

TEST(RecurrentRewind, NemotronHEqualsDecodingTheKeptTokens) {
  test::TempDir dir;
  expect_rewinds_exactly(*load_nemotron(dir));
}

// A bfloat16 SSM cache is rounded after every decoded row: the verify rows and their replay too.
TEST(RecurrentRewind, NemotronHWithABfloat16SsmCache) {
  test::TempDir dir;
  expect_rewinds_exactly(*load_nemotron(dir, "bfloat16"));
}

// With the chunked SSD prefill form on, a rewindable chunk still runs (and replays) row by row.
TEST(RecurrentRewind, NemotronHWithTheChunkedPrefillForm) {
  struct Form {
    Form() : was(mamba::prefill_form()) { mamba::set_prefill_form(mamba::PrefillForm::chunked); }
    ~Form() { mamba::set_prefill_form(was); }
    mamba::PrefillForm was;
  } chunked;
  test::TempDir dir;
  expect_rewinds_exactly(*load_nemotron(dir));
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Below the rewindable call's first position, or after a call that was not rewindable: Error,
// naming why, and the sequence is left as it was.
TEST(RecurrentRewind, TruncateOutsideARewindableCallFails) {
  test::TempDir dir;
  auto lm = load_hybrid(dir, 256);
  const size_t vocab = static_cast<size_t>(lm->vocab_size());
  SequenceState s = lm->new_sequence(32);
  std::vector<float> last(vocab), all(kVerify.size() * vocab);
  lm->forward(s, kPrefix.data(), static_cast<int64_t>(kPrefix.size()), LogitsMode::last, last.data());
  const int64_t n0 = s.length();
  EXPECT_NE(error_of([&] { s.truncate(n0 - 1); }).find("the last call was not"), std::string::npos);
  EXPECT_EQ(s.length(), n0);
  SequenceChunk c{&s, kVerify.data(), static_cast<int64_t>(kVerify.size()), LogitsMode::all, all.data()};
  c.rewindable = true;
  lm->forward(std::span<const SequenceChunk>(&c, 1));
  const std::vector<uint8_t> before = saved(s);
  const std::string e = error_of([&] { s.truncate(n0 - 1); });
  EXPECT_NE(e.find("cannot truncate 12 positions to 6"), std::string::npos) << e;
  EXPECT_NE(e.find("the last call began at position 7"), std::string::npos) << e;
  EXPECT_EQ(s.length(), n0 + 5);
  EXPECT_TRUE(same_bytes(saved(s), before));
  s.truncate(n0 + 2);  // inside the call: fine
  EXPECT_EQ(s.length(), n0 + 2);
  s.truncate(0);  // a reset always is
  EXPECT_EQ(s.length(), 0);
  EXPECT_NE(error_of([&] { s.truncate(1); }).find("cannot truncate 0 positions to 1"), std::string::npos);
}

}  // namespace
}  // namespace fp4lm::model::recurrent_rewind_test
