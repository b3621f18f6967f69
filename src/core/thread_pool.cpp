#include "core/thread_pool.h"

#include <algorithm>
#include <memory>

#include "core/cpu_features.h"
#include "core/error.h"

namespace fp4lm {

namespace {
thread_local bool t_in_worker = false;
std::unique_ptr<ThreadPool>& global_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  int chunks = static_cast<int>(std::min<int64_t>(threads_, n));
  if (chunks == 1 || t_in_worker) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    pending_ = chunks - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  t_in_worker = true;
  fn(0, n / chunks, 0);  // the caller does chunk 0
  t_in_worker = false;
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker(int index) {
  t_in_worker = true;
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t, int)>* job;
    int64_t n;
    int chunks;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      chunks = job_chunks_;
    }
    if (index < chunks) {
      (*job)(n * index / chunks, n * (index + 1) / chunks, index);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

ThreadPool& ThreadPool::global() {
  auto& slot = global_slot();
  if (!slot) slot = std::make_unique<ThreadPool>(cpu_features().physical_cores);
  return *slot;
}

void ThreadPool::set_global_threads(int threads) {
  if (threads < 1) usage_fail("--threads must be at least 1 (got {})", threads);
  auto& slot = global_slot();
  if (slot && slot->size() == threads) return;
  slot = std::make_unique<ThreadPool>(threads);
}

}  // namespace fp4lm
