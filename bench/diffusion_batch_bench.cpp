// DiffusionGemma served to N concurrent requests (engine/diffusion_queue.h, what `serve` and
// fp4lm.LLM run): N requests (prompts of different lengths, temperature 0, ignore_eos, the same
// max_tokens) queued at once and stepped to the end, with max_num_seqs 1 (one request at a time:
// the same forwards as the queue before batching, a canvas of one request per decoder pass) and
// with max_num_seqs N (a decoder pass runs the N canvases together). Prints per N and mode the
// wall seconds, the process CPU seconds (on a shared machine the wall time counts waiting, CPU
// time does not), the decoder passes (engine steps) and the aggregate generated tokens/s, and
// checks that both modes gave every request the same ids.
//
//   diffusion_batch_bench --model DIR [--threads 2] [--ns 1,2,4] [--max-tokens 128] [--dtype auto]
// docs/BENCHMARKS.md, "DiffusionGemma: concurrent requests batched".
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <time.h>

#include "bench_clock.h"
#include "core/thread_pool.h"
#include "engine/diffusion_queue.h"
#include "engine/runtime.h"

using namespace fp4lm;

namespace {

struct Run {
  double wall = 0, cpu = 0;
  int64_t steps = 0, tokens = 0;
  std::map<int64_t, std::vector<int32_t>> ids;
};

Run run(const engine::Runtime& rt, int64_t n, int64_t max_num_seqs, int64_t max_tokens) {
  engine::SchedulerConfig cfg;
  cfg.max_num_seqs = max_num_seqs;
  engine::DiffusionQueue q(*rt.diffusion(), rt.diffusion_schedule(), nullptr, rt.max_model_len(), cfg);
  for (int64_t i = 0; i < n; ++i) {
    engine::RequestParams p;
    for (int64_t t = 0; t < 16 + 7 * i; ++t) p.prompt.push_back(static_cast<int32_t>(3 + (t * 37 + i * 11) % 90));
    p.max_tokens = max_tokens;
    p.sampling.temperature = 0;
    p.ignore_eos = true;
    q.check(p);
    q.add(i, p);
  }
  Run r;
  const double w0 = wall_seconds(), c0 = process_cpu_seconds();
  while (q.has_work()) {
    for (auto& [id, o] : q.step()) {
      r.ids[id].insert(r.ids[id].end(), o.token_ids.begin(), o.token_ids.end());
      r.tokens += static_cast<int64_t>(o.token_ids.size());
    }
    ++r.steps;
  }
  r.wall = wall_seconds() - w0;
  r.cpu = process_cpu_seconds() - c0;
  return r;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  size_t a = 0;
  while (a < s.size()) {
    const size_t b = s.find(',', a);
    v.push_back(std::stoll(s.substr(a, b == std::string::npos ? std::string::npos : b - a)));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, dtype = "auto", ns = "1,2,4";
  int threads = 2;
  int64_t max_tokens = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") dir = argv[i + 1];
    else if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else if (a == "--ns") ns = argv[i + 1];
    else if (a == "--max-tokens") max_tokens = std::stoll(argv[i + 1]);
    else if (a == "--dtype") dtype = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: diffusion_batch_bench --model DIR [--threads N] [--ns 1,2,4] [--max-tokens N] "
                           "[--dtype D]\n");
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "diffusion_batch_bench: --model DIR is required\n");
    return 2;
  }
  ThreadPool::set_global_threads(threads);
  model::EngineOptions ro;
  ro.dtype = dtype;
  const engine::Runtime rt = engine::Runtime::load_any(dir, ro, {});
  std::printf("model %s, canvas %lld, %d threads, max_tokens %lld\n", dir.c_str(),
              static_cast<long long>(rt.diffusion()->config().canvas_length), threads,
              static_cast<long long>(max_tokens));
  std::printf("%3s %-9s %8s %8s %6s %7s %8s\n", "N", "mode", "wall_s", "cpu_s", "steps", "tokens", "tok/s");
  bool same = true;
  for (int64_t n : parse_list(ns)) {
    const Run one = run(rt, n, 1, max_tokens);
    const Run all = run(rt, n, n, max_tokens);
    for (const auto& [name, r] : {std::pair<const char*, const Run&>{"one-by-one", one}, {"batched", all}})
      std::printf("%3lld %-9s %8.2f %8.2f %6lld %7lld %8.2f\n", static_cast<long long>(n), name, r.wall, r.cpu,
                  static_cast<long long>(r.steps), static_cast<long long>(r.tokens),
                  static_cast<double>(r.tokens) / r.wall);
    same = same && one.ids == all.ids;
  }
  std::printf("ids batched == one-by-one: %s\n", same ? "yes" : "NO");
  return same ? 0 : 1;
}
