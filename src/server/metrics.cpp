#include "server/metrics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace fp4lm::server {

namespace {

// vLLM's buckets (vllm/v1/metrics/loggers.py).
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                                  0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestLatencyBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,  15.0, 20.0,
                                                    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kIterationTokenBuckets = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
const std::vector<double> kIterationSequenceBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
const std::vector<std::string> kFinishReasons = {"stop", "length", "abort", "error"};

// vLLM's 1-2-5 series up to the model length (request token counts).
std::vector<double> buckets_1_2_5(int64_t max_value) {
  std::vector<double> b;
  for (double e = 1;; e *= 10)
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * e > static_cast<double>(max_value)) return b;
      b.push_back(m * e);
    }
}

}  // namespace

std::string prom_number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string prom_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1) {}

void Histogram::observe(double v) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  sum_ += v;
  ++count_;
}

ServingMetrics::ServingMetrics(std::string model_name, int64_t max_model_len)
    : labels_(fmt::format("engine=\"0\",model_name=\"{}\"", prom_escape(model_name))),
      ttft_(kTtftBuckets), itl_(kTokenLatencyBuckets), tpot_(kTokenLatencyBuckets), e2e_(kRequestLatencyBuckets),
      queue_(kRequestLatencyBuckets), iteration_tokens_(kIterationTokenBuckets), prompt_len_(buckets_1_2_5(max_model_len)),
      gen_len_(buckets_1_2_5(max_model_len)),
      iteration_sequences_(kIterationSequenceBuckets) {
  for (const auto& r : kFinishReasons) success_[r] = 0;
}

engine::SchedulerObserver ServingMetrics::observer() {
  engine::SchedulerObserver o;
  o.on_step = [this](const engine::StepStats& s) { on_step(s); };
  o.on_finished = [this](const engine::RequestStats& s) { on_finished(s); };
  return o;
}

void ServingMetrics::on_step(const engine::StepStats& s) {
  std::lock_guard lk(mu_);
  prompt_tokens_ += static_cast<double>(s.prompt_tokens);
  generation_tokens_ += static_cast<double>(s.generation_tokens);
  prefix_queries_ += static_cast<double>(s.prefix_queries);
  prefix_hits_ += static_cast<double>(s.prefix_hits);
  spec_drafts_ += static_cast<double>(s.spec_drafts);
  spec_draft_tokens_ += static_cast<double>(s.spec_draft_tokens);
  spec_accepted_ += static_cast<double>(s.spec_accepted_tokens);
  if (spec_accepted_per_pos_.size() < s.spec_accepted_per_pos.size())
    spec_accepted_per_pos_.resize(s.spec_accepted_per_pos.size());
  for (size_t i = 0; i < s.spec_accepted_per_pos.size(); ++i)
    spec_accepted_per_pos_[i] += static_cast<double>(s.spec_accepted_per_pos[i]);
  iteration_tokens_.observe(static_cast<double>(s.prompt_tokens + s.generation_tokens));
  if (s.sequences > 0) iteration_sequences_.observe(static_cast<double>(s.sequences));
}

void ServingMetrics::on_finished(const engine::RequestStats& s) {
  std::lock_guard lk(mu_);
  success_[s.finish_reason] += 1;
  if (s.generation_tokens > 0) ttft_.observe(s.ttft_s);
  for (double gap : s.inter_token_s) itl_.observe(gap);
  if (s.generation_tokens > 1) {
    double total = 0;
    for (double gap : s.inter_token_s) total += gap;
    tpot_.observe(total / static_cast<double>(s.inter_token_s.size()));
  }
  e2e_.observe(s.e2e_s);
  queue_.observe(s.queue_s);
  prompt_len_.observe(static_cast<double>(s.prompt_tokens));
  gen_len_.observe(static_cast<double>(s.generation_tokens));
}

std::string ServingMetrics::render(const engine::EngineLoad& load) const {
  std::lock_guard lk(mu_);
  std::string o;
  auto header = [&](const std::string& name, const char* type, const char* help) {
    o += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    header(name, "gauge", help);
    o += fmt::format("{}{{{}}} {}\n", name, labels_, prom_number(v));
  };
  auto counter = [&](const char* name, const char* help, double v) {
    header(name, "counter", help);
    o += fmt::format("{}_total{{{}}} {}\n", name, labels_, prom_number(v));
  };
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    header(name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i <= h.bounds().size(); ++i) {
      cum += h.counts()[i];
      const double le = i < h.bounds().size() ? h.bounds()[i] : INFINITY;
      o += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels_, prom_number(le),
                       prom_number(static_cast<double>(cum)));
    }
    o += fmt::format("{}_count{{{}}} {}\n", name, labels_, prom_number(static_cast<double>(h.count())));
    o += fmt::format("{}_sum{{{}}} {}\n", name, labels_, prom_number(h.sum()));
  };

  gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
        static_cast<double>(load.running));
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", static_cast<double>(load.waiting));
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        load.kv_budget_bytes ? static_cast<double>(load.kv_reserved_bytes) / static_cast<double>(load.kv_budget_bytes)
                             : 0.0);
  counter("vllm:prompt_tokens", "Number of prefill tokens processed.", prompt_tokens_);
  counter("vllm:generation_tokens", "Number of generation tokens processed.", generation_tokens_);
  counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
          prefix_queries_);
  counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", prefix_hits_);
  counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", spec_drafts_);
  counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", spec_draft_tokens_);
  counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", spec_accepted_);
  header("vllm:spec_decode_num_accepted_tokens_per_pos", "counter", "Accepted tokens per draft position.");
  for (size_t i = 0; i < spec_accepted_per_pos_.size(); ++i)
    o += fmt::format("vllm:spec_decode_num_accepted_tokens_per_pos_total{{{},position=\"{}\"}} {}\n", labels_, i,
                     prom_number(spec_accepted_per_pos_[i]));
  header("vllm:request_success", "counter", "Count of successfully processed requests.");
  for (const auto& [reason, n] : success_)
    o += fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", labels_, prom_escape(reason),
                     prom_number(n));
  histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", prompt_len_);
  histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", gen_len_);
  histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", iteration_tokens_);
  // Not vLLM's: how many sequences each step ran together (the batch a client cannot see).
  histogram("fp4lm:iteration_sequences", "Histogram of number of sequences per engine step.", iteration_sequences_);
  histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft_);
  histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl_);
  histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", tpot_);
  histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2e_);
  histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", queue_);
  return o;
}

}  // namespace fp4lm::server
