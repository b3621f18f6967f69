#pragma once
// A few threads for request work too heavy for the event loop (JSON bodies, chat templates,
// tokenization, admission): a slow request then delays only requests queued behind it, never
// /health, /metrics or a stream's writes.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fp4lm::server {

class WorkerPool {
 public:
  explicit WorkerPool(size_t threads);
  ~WorkerPool();  // runs what is queued, then joins
  void submit(std::function<void()> job);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace fp4lm::server
