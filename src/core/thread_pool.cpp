#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <system_error>
#include <utility>

#include "core/cpu_features.h"
#include "core/error.h"

namespace fp4lm {

namespace {
thread_local bool t_in_worker = false;

// Marks the current thread as running a chunk for as long as it lives, whatever way it ends.
class InWorkerScope {
 public:
  InWorkerScope() : saved_(t_in_worker) { t_in_worker = true; }
  ~InWorkerScope() { t_in_worker = saved_; }
  InWorkerScope(const InWorkerScope&) = delete;
  InWorkerScope& operator=(const InWorkerScope&) = delete;

 private:
  bool saved_;
};

// Spins until done() or about kSpin has passed, whichever comes first: the callers then take the
// mutex and wait on their condition either way, so which one ended the spin does not matter. Short
// enough that an idle pool costs nothing measurable, long enough to cover the gap between a decode
// step's jobs.
constexpr auto kSpin = std::chrono::microseconds(50);
template <class Done>
void spin_until(Done done) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; !done(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() - t0 > kSpin) return;
  }
}

std::unique_ptr<ThreadPool>& global_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
}  // namespace

ThreadPool::ThreadPool(int threads)
    : ThreadPool(threads, [](std::function<void()> body) { return std::thread(std::move(body)); }) {}

ThreadPool::ThreadPool(int threads, const ThreadStarter& start_thread) : threads_(std::max(1, threads)) {
  workers_.reserve(static_cast<size_t>(threads_ - 1));
  for (int i = 1; i < threads_; ++i) {
    try {
      workers_.push_back(start_thread([this, i] { worker(i); }));
    } catch (const std::exception& e) {
      // The destructor will not run for a half-built pool: stop and join what was started here.
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      start_cv_.notify_all();
      for (auto& t : workers_) t.join();
      fail("cannot start worker thread {} of {}: {} (try a smaller threads)", i + 1, threads_, e.what());
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::record_error(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_) error_ = std::move(e);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  int chunks = static_cast<int>(std::min<int64_t>(threads_, n));
  if (chunks == 1 || t_in_worker) {
    fn(0, n, 0);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    pending_ = chunks - 1;
    error_ = nullptr;
    ++generation_;
    published_pending_.store(pending_, std::memory_order_relaxed);
    published_generation_.store(generation_, std::memory_order_release);
  }
  start_cv_.notify_all();
  try {
    InWorkerScope scope;
    fn(0, n / chunks, 0);  // the caller does chunk 0
  } catch (...) {
    record_error(std::current_exception());
  }
  std::exception_ptr error;
  spin_until([this] { return published_pending_.load(std::memory_order_acquire) == 0; });
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });  // every chunk is joined, even after a throw
    job_ = nullptr;
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker(int index) {
  t_in_worker = true;
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t, int)>* job;
    int64_t n;
    int chunks;
    spin_until([&] { return published_generation_.load(std::memory_order_acquire) != seen; });
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
      std::exception_ptr error;
      try {
        (*job)(n * index / chunks, n * (index + 1) / chunks, index);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (error && !error_) error_ = std::move(error);
      published_pending_.store(--pending_, std::memory_order_release);
      if (pending_ == 0) done_cv_.notify_one();
    }
  }
}

int ThreadPool::max_threads() {
  int hw = std::max({1, static_cast<int>(std::thread::hardware_concurrency()), cpu_features().logical_cores});
  return 4 * hw;
}

ThreadPool& ThreadPool::global() {
  auto& slot = global_slot();
  if (!slot) slot = std::make_unique<ThreadPool>(cpu_features().physical_cores);
  return *slot;
}

void ThreadPool::set_global_threads(int threads) {
  if (threads < 1) usage_fail("threads must be at least 1 (got {})", threads);
  if (threads > max_threads())
    usage_fail("threads must be at most {} (4 x the {} hardware threads), got {}", max_threads(),
               max_threads() / 4, threads);
  auto& slot = global_slot();
  if (slot && slot->size() == threads) return;
  slot.reset();  // join the old workers before starting new ones
  slot = std::make_unique<ThreadPool>(threads);
}

}  // namespace fp4lm
