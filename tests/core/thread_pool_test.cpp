// ThreadPool: the chunking contract, and what happens when a chunk throws or a worker thread
// cannot be started (issue 10: a throw on a worker used to abort the process, and a throw on the
// caller left every later job running on one thread).
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "common/error_of.h"
#include "core/error.h"

namespace fp4lm::thread_pool_test {
namespace {

// Runs one job of n items and returns, per chunk, whether it ran on a thread other than the caller.
std::vector<bool> chunk_ran_elsewhere(ThreadPool& pool, int64_t n) {
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<int> elsewhere(static_cast<size_t>(pool.size()), -1);
  pool.parallel_for(n, [&](int64_t, int64_t, int t) { elsewhere[t] = std::this_thread::get_id() != caller; });
  std::vector<bool> out;
  for (int v : elsewhere)
    if (v >= 0) out.push_back(v == 1);
  return out;
}

TEST(ThreadPool, ChunksCoverTheRangeOnEveryThread) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(10);
  pool.parallel_for(10, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_EQ(chunk_ran_elsewhere(pool, 3), (std::vector<bool>{false, true, true}));
}

TEST(ThreadPool, AThrowOnAWorkerReachesTheCallerAndThePoolStaysWhole) {
  ThreadPool pool(2);
  const std::string msg = test::error_of([&] {
    pool.parallel_for(2, [](int64_t b, int64_t, int) {
      if (b == 1) fail("token {} is bad", b);
    });
  });
  EXPECT_EQ(msg, "token 1 is bad");
  EXPECT_EQ(chunk_ran_elsewhere(pool, 2), (std::vector<bool>{false, true}));
}

TEST(ThreadPool, AThrowOnTheCallerStillJoinsEveryChunkAndThePoolStaysWhole) {
  ThreadPool pool(3);
  std::atomic<int> finished{0};
  EXPECT_THROW(pool.parallel_for(3,
                                 [&](int64_t b, int64_t, int) {
                                   if (b == 0) throw std::runtime_error("caller chunk");
                                   finished++;
                                 }),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 2);
  // The caller's chunk threw while it was marked as running a chunk; the next job must still use
  // every thread instead of running inline.
  EXPECT_EQ(chunk_ran_elsewhere(pool, 3), (std::vector<bool>{false, true, true}));
}

TEST(ThreadPool, ParallelForReturnsOnlyAfterTheOtherChunksOfAFailedJob) {
  ThreadPool pool(3);
  std::atomic<bool> thrown{false};
  std::atomic<int> late_chunk_done{0};
  EXPECT_THROW(pool.parallel_for(3,
                                 [&](int64_t b, int64_t, int) {
                                   if (b == 1) {
                                     thrown = true;
                                     throw std::runtime_error("worker chunk");
                                   }
                                   if (b == 2) {
                                     while (!thrown) std::this_thread::yield();
                                     late_chunk_done = 1;
                                   }
                                 }),
               std::runtime_error);
  EXPECT_EQ(late_chunk_done.load(), 1);
}

TEST(ThreadPool, WhenSeveralChunksThrowOneErrorReachesTheCaller) {
  ThreadPool pool(4);
  for (int round = 0; round < 20; ++round) {
    const std::string msg =
        test::error_of([&] { pool.parallel_for(4, [](int64_t b, int64_t, int) { fail("chunk {}", b); }); });
    EXPECT_TRUE(msg == "chunk 0" || msg == "chunk 1" || msg == "chunk 2" || msg == "chunk 3") << msg;
  }
  EXPECT_EQ(chunk_ran_elsewhere(pool, 4), (std::vector<bool>{false, true, true, true}));
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(2, [&](int64_t, int64_t, int) {
    pool.parallel_for(5, [&](int64_t b, int64_t e, int t) {
      EXPECT_EQ(t, 0);
      inner += static_cast<int>(e - b);
    });
  });
  EXPECT_EQ(inner.load(), 10);
}

TEST(ThreadPool, AWorkerThatCannotStartIsACleanErrorAndStopsTheOthers) {
  std::atomic<int> started{0}, exited{0};
  auto starter = [&](std::function<void()> body) -> std::thread {
    if (started == 2) throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    ++started;
    return std::thread([&exited, body = std::move(body)] {
      body();
      ++exited;
    });
  };
  const std::string msg = test::error_of([&] { ThreadPool pool(4, starter); });
  EXPECT_NE(msg.find("cannot start worker thread 4 of 4"), std::string::npos) << msg;
  EXPECT_EQ(exited.load(), 2);  // both started workers were stopped and joined
}

TEST(ThreadPool, ThreadCountIsBounded) {
  EXPECT_GE(ThreadPool::max_threads(), 4);
  EXPECT_THROW(ThreadPool::set_global_threads(0), UsageError);
  const std::string msg = test::error_of([] { ThreadPool::set_global_threads(ThreadPool::max_threads() + 1); });
  EXPECT_NE(msg.find("threads must be at most"), std::string::npos) << msg;
  try {
    ThreadPool::set_global_threads(ThreadPool::max_threads() + 1);
    ADD_FAILURE() << "no error";
  } catch (const UsageError&) {
  }
}

}  // namespace
}  // namespace fp4lm::thread_pool_test
