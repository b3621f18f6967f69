#pragma once
// /metrics: Prometheus text exposition with vLLM's metric names, label names and histogram
// buckets, so dashboards built for `vllm serve` work unchanged. Fed by the scheduler's observer
// (engine thread) and read by HTTP threads.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/scheduler.h"

namespace fp4lm::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }  // per bucket, not cumulative; last = +Inf
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServingMetrics {
 public:
  // `max_model_len` bounds the request-length histograms' buckets (vLLM's 1-2-5 series).
  ServingMetrics(std::string model_name, int64_t max_model_len);
  // Hooks for the scheduler (called on the engine thread).
  engine::SchedulerObserver observer();
  void on_step(const engine::StepStats& s);
  void on_finished(const engine::RequestStats& s);
  // The exposition text (text/plain; version=0.0.4).
  std::string render(const engine::EngineLoad& load) const;

 private:
  std::string labels_;  // engine="0",model_name="..."
  mutable std::mutex mu_;
  double prompt_tokens_ = 0, generation_tokens_ = 0, prefix_queries_ = 0, prefix_hits_ = 0;
  double spec_drafts_ = 0, spec_draft_tokens_ = 0, spec_accepted_ = 0;
  std::vector<double> spec_accepted_per_pos_;
  std::map<std::string, double> success_;  // finished_reason -> count
  Histogram ttft_, itl_, tpot_, e2e_, queue_, iteration_tokens_, prompt_len_, gen_len_;
  Histogram iteration_sequences_;  // fp4lm:iteration_sequences: the batch of each step that ran one
};

// A Prometheus sample value / `le` label the way the Python client prints it ("1.0", "+Inf").
std::string prom_number(double v);
// A label value with \\, \" and \n escaped.
std::string prom_escape(const std::string& s);

}  // namespace fp4lm::server
