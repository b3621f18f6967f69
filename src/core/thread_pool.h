#pragma once
// A fixed pool of worker threads shared by all kernels (`--threads N`). parallel_for splits a
// range into one contiguous chunk per thread, always the same way for the same (n, threads), so
// results never depend on scheduling.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fp4lm {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  // Calls fn(begin, end, thread_index) on disjoint chunks covering [0, n); blocks until done.
  // Chunk t is [n*t/T, n*(t+1)/T) with T = min(size(), n). Not reentrant: a nested call from a
  // worker runs inline on that worker.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);

  // The process-wide pool. Its size defaults to the number of physical cores.
  static ThreadPool& global();
  static void set_global_threads(int threads);  // UsageError when threads < 1

 private:
  void worker(int index);

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace fp4lm
