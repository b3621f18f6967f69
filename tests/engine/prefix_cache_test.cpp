// Automatic prefix caching: the block pool (chains by content and parent, reference counts, LRU
// eviction with the blocks that continue an evicted one, bytes) and the scheduler's use of it on
// the fake model (hits skip the cached prompt tokens, the budget covers sequences and blocks,
// admission evicts, a recurrent model resumes only where its state was saved).
#include <gtest/gtest.h>

#include <numeric>

#include "engine/greedy_request.h"
#include "engine/prefix_cache.h"
#include "engine/scheduler.h"
#include "fake_step_model.h"

namespace fp4lm::engine::prefix_cache_test {
namespace {

using test::FakeStepModel;
using Id = PrefixCache::BlockId;

std::vector<int32_t> iota(int n, int32_t from) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

std::vector<uint8_t> bytes(size_t n) { return std::vector<uint8_t>(n, 7); }

// Inserts the full blocks of `t` after the cached ones; returns the whole chain.
std::vector<Id> insert_all(PrefixCache& c, const std::vector<int32_t>& t, size_t block_bytes = 10) {
  std::vector<Id> ids;
  Id parent = PrefixCache::kNone;
  for (size_t b = 0; (b + 1) * static_cast<size_t>(c.block_size()) <= t.size(); ++b) {
    parent = c.insert(parent, std::span(t).subspan(b * c.block_size(), c.block_size()), bytes(block_bytes));
    ids.push_back(parent);
  }
  return ids;
}

TEST(PrefixCache, MatchesWholeBlocksByContentAndParent) {
  PrefixCache c(4);
  const std::vector<int32_t> a = iota(10, 1);  // blocks [1..4], [5..8]; 9, 10 do not fill one
  const std::vector<Id> ids = insert_all(c, a);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.bytes(), 20u);
  EXPECT_EQ(c.match(a, 10), ids);
  EXPECT_EQ(c.match(a, 7), std::vector<Id>{ids[0]}) << "at most max_tokens, whole blocks";
  std::vector<int32_t> b = a;
  b[5] = 99;  // second block differs
  EXPECT_EQ(c.match(b, 10), std::vector<Id>{ids[0]});
  b[0] = 99;  // first block differs: nothing, even though the second is as cached
  b[5] = 6;
  EXPECT_TRUE(c.match(b, 10).empty());
  // The same tokens after another parent are another block.
  std::vector<int32_t> shifted = {0, 0, 0, 0, 5, 6, 7, 8};
  EXPECT_TRUE(c.match(shifted, 8).empty());
  const std::vector<Id> s = insert_all(c, shifted);
  EXPECT_NE(s[1], ids[1]);
  EXPECT_EQ(c.size(), 4u);
  // Inserting what is cached returns the cached block.
  EXPECT_EQ(insert_all(c, a), ids);
  EXPECT_EQ(c.size(), 4u);
}

TEST(PrefixCache, ReferencedBlocksStayAndTheLeastRecentlyUsedGoesFirstWithItsContinuations) {
  PrefixCache c(2);
  const std::vector<Id> x = insert_all(c, {1, 2, 3, 4, 5, 6});  // 3 blocks
  const std::vector<Id> y = insert_all(c, {9, 9, 8, 8});        // 2 blocks, more recent
  EXPECT_EQ(c.bytes(), 50u);
  c.acquire(x);
  c.acquire(x);  // two sequences share x
  EXPECT_EQ(c.get(x[0])->refs, 2);
  // Unreferenced only: y goes (whole chain), x stays.
  EXPECT_FALSE(c.shrink_to(10, false));
  EXPECT_EQ(c.size(), 3u);
  EXPECT_FALSE(c.contains(y[0]) || c.contains(y[1]));
  EXPECT_EQ(c.evictions(), 2);
  c.release(x);
  EXPECT_EQ(c.get(x[2])->refs, 1);
  EXPECT_FALSE(c.shrink_to(0, false)) << "still referenced once";
  c.release(x);
  EXPECT_EQ(c.get(x[0])->refs, 0);
  // Released in reverse order: the chain's tail is the least recently used, so shrinking by one
  // block drops the tail only and keeps the prefix matchable.
  EXPECT_TRUE(c.shrink_to(20, false));
  EXPECT_TRUE(c.contains(x[0]) && c.contains(x[1]) && !c.contains(x[2]));
  EXPECT_EQ(c.match(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, 6).size(), 2u);
  // Evicting a parent takes its continuations with it: no unreachable block keeps memory.
  c.acquire(std::vector<Id>{x[0], x[1]});
  c.release(std::vector<Id>{x[1]});  // now x[1] is more recent than x[0]... but x[0] is referenced
  EXPECT_TRUE(c.shrink_to(0, true)) << "referenced blocks go too when asked";
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.bytes(), 0u);
  c.release(x);  // stale ids are ignored
}

TEST(PrefixCache, StateSnapshotsCountInBytes) {
  PrefixCache c(2);
  const std::vector<Id> x = insert_all(c, {1, 2, 3, 4});
  c.add_state(x[1], bytes(5));
  EXPECT_EQ(c.bytes(), 25u);
  c.add_state(x[1], bytes(9));  // one snapshot per block
  EXPECT_EQ(c.bytes(), 25u);
  EXPECT_TRUE(c.shrink_to(0, false));
  EXPECT_EQ(c.bytes(), 0u);
}


struct Finished {
  std::vector<int32_t> tokens;
  RequestOutput last;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> batches;
};

// Runs one request to the end.
Finished run_one(Scheduler& s, int64_t id, RequestParams p) {
  s.add(id, std::move(p));
  Finished r;
  for (int i = 0; i < 200 && s.has_work(); ++i) {
    for (auto& [rid, out] : s.step()) {
      EXPECT_EQ(rid, id);
      r.tokens.insert(r.tokens.end(), out.token_ids.begin(), out.token_ids.end());
      r.last = out;
    }
    r.batches.push_back(s.last_batch());
    if (s.config().kv_cache_bytes > 0) {
      EXPECT_LE(s.kv_reserved_bytes() + s.prefix_cache_bytes(), s.config().kv_cache_bytes) << "over the budget";
    }
  }
  EXPECT_FALSE(s.has_work());
  return r;
}

SchedulerConfig caching(int64_t block, size_t budget = 0) {
  SchedulerConfig c;
  c.enable_prefix_caching = true;
  c.block_size = block;
  c.kv_cache_bytes = budget;
  c.max_num_batched_tokens = 64;
  return c;
}

TEST(PrefixCacheScheduler, AHitSkipsTheCachedBlocksAndGivesTheSameTokens) {
  FakeStepModel m;
  m.max_len = 64;
  Scheduler s(m, nullptr, caching(4));
  std::vector<int32_t> system = iota(10, 3);  // 10 shared tokens: blocks [0,4), [4,8) full
  std::vector<int32_t> a = system, b = system;
  a.insert(a.end(), {20, 21, 22});
  b.insert(b.end(), {25, 26});
  const Finished ra = run_one(s, 1, greedy_request(a, 3));
  EXPECT_EQ(ra.last.cached_tokens, 0);
  EXPECT_EQ(s.prefix_cache()->size(), 3u) << "13 prompt tokens: 3 full blocks, the last held back";
  const Finished rb = run_one(s, 2, greedy_request(b, 3));
  EXPECT_EQ(rb.last.cached_tokens, 8);
  EXPECT_EQ(rb.batches[0], (std::vector<std::pair<int64_t, int64_t>>{{2, 4}})) << "only 12 - 8 tokens computed";
  EXPECT_EQ(m.loaded, 8);
  EXPECT_EQ(s.prefix_queries(), 25);
  EXPECT_EQ(s.prefix_hits(), 8);
  // Same tokens as with the cache off.
  FakeStepModel cold_model;
  Scheduler cold(cold_model, nullptr, SchedulerConfig{});
  EXPECT_EQ(run_one(cold, 2, greedy_request(b, 3)).tokens, rb.tokens);
  // A prompt that is entirely cached still computes its last token.
  const Finished rc = run_one(s, 3, greedy_request(std::vector<int32_t>(a.begin(), a.begin() + 12), 2));
  EXPECT_EQ(rc.last.cached_tokens, 8) << "12 tokens cached, but the 12th must run: 8";
  EXPECT_EQ(rc.batches[0], (std::vector<std::pair<int64_t, int64_t>>{{3, 4}}));
}

TEST(PrefixCacheScheduler, RunningSequencesHoldReferencesUntilTheyFinish) {
  FakeStepModel m;
  Scheduler s(m, nullptr, caching(4));
  const std::vector<int32_t> p = iota(9, 1);
  s.add(1, greedy_request(p, 5));
  s.step();  // prefill: blocks cached and referenced
  ASSERT_EQ(s.prefix_cache()->size(), 2u);
  const auto chain = s.prefix_cache()->match(p, 8);
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_EQ(s.prefix_cache()->get(chain[0])->refs, 1);
  s.add(2, greedy_request(p, 5));
  s.step();  // the second hits and references them too
  EXPECT_EQ(s.prefix_cache()->get(chain[0])->refs, 2);
  EXPECT_EQ(s.prefix_cache()->get(chain[1])->refs, 2);
  while (s.has_work()) s.step();
  EXPECT_EQ(s.prefix_cache()->get(chain[0])->refs, 0);
  EXPECT_EQ(s.prefix_cache()->get(chain[1])->refs, 0);
  EXPECT_EQ(s.kv_reserved_bytes(), 0u);
  EXPECT_EQ(s.prefix_cache_bytes(), 32u) << "unreferenced blocks stay cached";
}

TEST(PrefixCacheScheduler, SequencesAndBlocksShareTheBudgetAndAdmissionEvicts) {
  FakeStepModel m;  // 100 bytes per reserved position, 4 per cached token
  m.vocab = 6000;
  // Budget for one 20-position sequence plus 8 blocks of 4 tokens (128 bytes) at most.
  Scheduler s(m, nullptr, caching(4, 2000 + 128));
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < 4; ++r) prompts.push_back(iota(17, 100 * r));  // 4 blocks each, all different
  for (int r = 0; r < 4; ++r) {
    const Finished run = run_one(s, r, greedy_request(prompts[static_cast<size_t>(r)], 3));
    EXPECT_EQ(run.tokens.size(), 3u);
    EXPECT_LE(s.prefix_cache_bytes(), 128u);
  }
  // The pool is full: the two most recent prompts' blocks, the older ones evicted.
  EXPECT_EQ(s.prefix_cache()->size(), 8u);
  EXPECT_TRUE(s.prefix_cache()->match(prompts[0], 16).empty());
  EXPECT_EQ(s.prefix_cache()->match(prompts[3], 16).size(), 4u);
  // A sequence of 21 positions (2100 bytes) fits only if the pool gives way: it is admitted,
  // and of its own blocks only the first finds room (the next would need a block it uses).
  const Finished big = run_one(s, 9, greedy_request(iota(17, 5000), 4));
  EXPECT_EQ(big.tokens.size(), 4u);
  EXPECT_EQ(big.batches[0], (std::vector<std::pair<int64_t, int64_t>>{{9, 17}})) << "admitted at once";
  EXPECT_EQ(s.prefix_cache_bytes(), 16u);
  EXPECT_EQ(s.prefix_cache()->match(iota(17, 5000), 16).size(), 1u);
}

TEST(PrefixCacheScheduler, InsertsNeverEvictBlocksInUse) {
  FakeStepModel m;
  // One 13-position sequence (1300 bytes) + 2 blocks of 4 tokens.
  Scheduler s(m, nullptr, caching(4, 1300 + 32));
  s.add(1, greedy_request(iota(12, 1), 1));  // 3 blocks would fit only if one were evicted: none is free
  while (s.has_work()) s.step();
  EXPECT_EQ(s.prefix_cache()->size(), 2u) << "the third block found no room";
  EXPECT_LE(s.prefix_cache_bytes() + s.kv_reserved_bytes(), 1332u);
}

TEST(PrefixCacheScheduler, ARecurrentModelCutsItsPromptAtTheSnapshotPointAndResumesOnlyThere) {
  FakeStepModel m;
  m.max_len = 96;
  m.vocab = 100;
  m.prefix.snapshot_grid = 8;  // as lcm(block 4, the model's row alignment 8)
  Scheduler s(m, nullptr, caching(4));
  const std::vector<int32_t> a = iota(21, 1);  // snapshot point: the last multiple of 8 below 21 -> 16
  const Finished ra = run_one(s, 1, greedy_request(a, 2));
  EXPECT_EQ(ra.batches[0], (std::vector<std::pair<int64_t, int64_t>>{{1, 16}}));
  EXPECT_EQ(ra.batches[1], (std::vector<std::pair<int64_t, int64_t>>{{1, 5}}));
  EXPECT_EQ(s.prefix_cache()->size(), 4u) << "blocks up to the snapshot point only";
  const auto chain = s.prefix_cache()->match(a, 20);
  ASSERT_EQ(chain.size(), 4u);
  EXPECT_TRUE(s.prefix_cache()->get(chain[2])->state.empty());
  EXPECT_FALSE(s.prefix_cache()->get(chain[3])->state.empty());
  // Sharing 14 tokens: blocks 0..2 match but carry no state, so nothing resumes.
  std::vector<int32_t> b(a.begin(), a.begin() + 14);
  b.insert(b.end(), {90, 91, 92, 93, 94});
  EXPECT_EQ(run_one(s, 2, greedy_request(b, 2)).last.cached_tokens, 0);
  // Sharing 18: resumes at 16 with the saved state (the fake checks it was saved at 16).
  std::vector<int32_t> c(a.begin(), a.begin() + 18);
  c.insert(c.end(), {90, 91, 92});
  const Finished rc = run_one(s, 3, greedy_request(c, 2));
  EXPECT_EQ(rc.last.cached_tokens, 16);
  EXPECT_EQ(rc.batches[0], (std::vector<std::pair<int64_t, int64_t>>{{3, 5}}));
  FakeStepModel cold_model;
  cold_model.vocab = 100;
  Scheduler cold(cold_model, nullptr, SchedulerConfig{});
  EXPECT_EQ(run_one(cold, 3, greedy_request(c, 2)).tokens, rc.tokens);
}

TEST(PrefixCacheScheduler, ASlidingWindowModelPrefillsInChunksItsRingHolds) {
  FakeStepModel m;
  m.prefix.max_chunk = 5;
  Scheduler s(m, nullptr, caching(4));
  const Finished r = run_one(s, 1, greedy_request(iota(12, 1), 1));
  EXPECT_EQ(r.batches[0], (std::vector<std::pair<int64_t, int64_t>>{{1, 5}}));
  EXPECT_EQ(r.batches[1], (std::vector<std::pair<int64_t, int64_t>>{{1, 5}}));
  EXPECT_EQ(r.batches[2], (std::vector<std::pair<int64_t, int64_t>>{{1, 2}}));
  EXPECT_EQ(s.prefix_cache()->size(), 3u);
}

TEST(PrefixCacheScheduler, OffByDefaultAndBlockSizeChecked) {
  FakeStepModel m;
  Scheduler s(m, nullptr, SchedulerConfig{});
  EXPECT_EQ(s.prefix_cache(), nullptr);
  SchedulerConfig bad = caching(0);
  EXPECT_THROW(check_config(bad), RequestError);
}

}  // namespace
}  // namespace fp4lm::engine::prefix_cache_test
