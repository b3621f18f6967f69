#pragma once
// A fixed pool of worker threads shared by all kernels (`--threads N`). parallel_for splits a
// range into one contiguous chunk per thread, always the same way for the same (n, threads), so
// results never depend on scheduling.
//
// Exceptions: a chunk that throws (on a worker or on the caller) never escapes its thread; every
// chunk of the job still runs to its end and is joined, then the first exception recorded is
// rethrown on the caller. The pool is left idle and whole, so the next job uses every thread.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fp4lm {

class ThreadPool {
 public:
  // How a worker thread is started; tests substitute one that fails.
  using ThreadStarter = std::function<std::thread(std::function<void()>)>;

  // Error (nothing left running) when a worker thread cannot be created.
  explicit ThreadPool(int threads);
  ThreadPool(int threads, const ThreadStarter& start_thread);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  // Calls fn(begin, end, thread_index) on disjoint chunks covering [0, n); blocks until every
  // chunk has finished, then rethrows the first exception a chunk threw. Chunk t is
  // [n*t/T, n*(t+1)/T) with T = min(size(), n). Not reentrant: a nested call from a worker (or
  // from the caller's own chunk) runs inline on that thread. Calls from several outside threads
  // are serialized.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

  // The largest thread count accepted: 4 × the hardware threads (more only adds contention).
  static int max_threads();

  // The process-wide pool. Its size defaults to the number of physical cores.
  static ThreadPool& global();
  // UsageError when threads < 1 or > max_threads().
  static void set_global_threads(int threads);

 private:
  void worker(int index);
  void record_error(std::exception_ptr e);

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one job at a time
  std::mutex mu_;       // guards everything below
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  // Mirrors of generation_ and pending_ (written under mu_) that a thread reads without the lock
  // while it spins briefly before sleeping: a decode step runs dozens of short jobs, and a
  // futex sleep/wake per job costs more than the gap between them.
  std::atomic<uint64_t> published_generation_{0};
  std::atomic<int> published_pending_{0};
  std::exception_ptr error_;  // the first exception of the current job
  bool stop_ = false;
};

}  // namespace fp4lm
