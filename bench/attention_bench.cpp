// Attention over the KV cache in a decode step: model::causal_attention (kernels/attention.h) on
// one query row per layer, for every attention-kernel variant available here, against the
// `reference` variant (the scalar loops fp4lm had before the kernel: one query head at a time,
// cached rows converted to float32 through a buffer) measured in the same run. Each layer has its
// own KV plane in one KvCache, as in the model, so a step streams `layers` × the KV bytes of the
// context from memory, not from cache. Wall time, median of --reps steps after one warm-up; and
// the process's CPU time per step (with --threads 1 the kernel's own time, robust on a loaded
// machine; with more threads it includes the pool's spinning).
//
//   attention_bench [--heads 32] [--kv-heads 4] [--head-dim 128] [--layers 48]
//                   [--positions 500,2000] [--dtype bfloat16|float16|float32|fp8] [--threads T]
//                   [--rows 1] [--reps 7] [--variants avx512,avx2,reference]
// Defaults: the Qwen3-30B-A3B attention shape (32 query heads, 4 KV heads, head_dim 128, 48
// layers), bf16 cache. --rows R > 1 times a prefill chunk of R rows ending at each position.
//
//   attention_bench --gemma4 31b|26b-a4b [--positions 4096,32768] [--dtype ...] [--threads T] [--reps 7]
// Gemma 4's attention per decoded token as the model lays it out (model::KvCache slots of
// two shapes): the sliding layers (window 1024, their K/V in a ring of window - 1 + 256 rows,
// the prefill chunk) and the full layers (their own head_dim 512 and KV heads, every position),
// the default kernel, each rep one more decoded position. Baseline in the same run: a sliding
// layer's shape attending to every position (no window), on as many layers as fit 2 GiB, scaled
// to all the sliding layers — the ratio is what the window saves.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "model/layers/attention.h"
#include "model/state/kv_cache.h"

namespace {

using namespace fp4lm;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');)
    if (!part.empty()) out.push_back(part);
  return out;
}

double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

int usage() {
  std::fprintf(stderr,
               "usage: attention_bench [--heads N] [--kv-heads N] [--head-dim N] [--layers N] [--positions P,P]\n"
               "                       [--dtype bfloat16|float16|float32|fp8] [--threads T] [--rows R] [--reps N]\n"
               "                       [--variants a,b]\n"
               "       attention_bench --gemma4 31b|26b-a4b [--positions P,P] [--dtype D] [--threads T] [--reps N]\n");
  return 2;
}

// Gemma 4's attention shapes (config.json text_config of Gemma-4-31B-IT / Gemma-4-26B-A4B):
// every 6th layer full (keys doubling as values, own head_dim / KV heads), the others sliding.
struct GemmaShape {
  const char* name;
  int64_t layers, heads, sliding_kv_heads, sliding_head_dim, full_kv_heads, full_head_dim, window;
  bool full(int64_t i) const { return (i + 1) % 6 == 0 || i == layers - 1; }
};

constexpr int64_t kPrefillChunk = 256;  // model::CausalLmOptions::prefill_chunk: the ring's extra rows

// Fills positions [lo, hi) of `layer` with rows cycled from a small random pool (values do not
// change the time; drawing gigabytes of normals would).
void fill(model::KvCache& cache, int64_t layer, int64_t lo, int64_t hi, std::mt19937& rng) {
  const size_t width = static_cast<size_t>(cache.num_kv_heads(layer) * cache.head_dim(layer));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> pool(16, std::vector<float>(width));
  for (auto& row : pool)
    for (float& x : row) x = normal(rng);
  for (int64_t t = lo; t < hi; ++t)
    cache.store(layer, t, pool[static_cast<size_t>(t) % 16].data(), pool[static_cast<size_t>(t + 7) % 16].data());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int gemma_main(const GemmaShape& g, const std::vector<int64_t>& positions, DType dt, const std::string& dtype,
               int64_t reps) {
  ThreadPool& pool = ThreadPool::global();
  const kernels::AttentionKernel& kern = kernels::attention_kernel();
  int64_t n_full = 0;
  for (int64_t i = 0; i < g.layers; ++i) n_full += g.full(i) ? 1 : 0;
  const int64_t n_sliding = g.layers - n_full;
  std::printf("%s attention per decoded token: %lld layers = %lld sliding (window %lld, %lld KV heads x %lld, ring of "
              "%lld rows) + %lld full (%lld KV heads x %lld), %lld query heads, %s cache, '%s' kernel, %d threads, "
              "median of %lld consecutive positions\n",
              g.name, static_cast<long long>(g.layers), static_cast<long long>(n_sliding),
              static_cast<long long>(g.window), static_cast<long long>(g.sliding_kv_heads),
              static_cast<long long>(g.sliding_head_dim), static_cast<long long>(g.window - 1 + kPrefillChunk),
              static_cast<long long>(n_full), static_cast<long long>(g.full_kv_heads),
              static_cast<long long>(g.full_head_dim), static_cast<long long>(g.heads), dtype.c_str(), kern.name,
              pool.size(), static_cast<long long>(reps));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t P : positions) {
    const int64_t capacity = P + reps + 1;  // rep r decodes position P - 1 + r
    const model::KvSlotShape sliding{g.sliding_kv_heads, g.sliding_head_dim, g.window};
    const model::KvSlotShape full{g.full_kv_heads, g.full_head_dim, 0};
    const model::KvSlotShape unwindowed{g.sliding_kv_heads, g.sliding_head_dim, 0};
    const double unwindowed_bytes =
        static_cast<double>(capacity * g.sliding_kv_heads * g.sliding_head_dim * 2) * static_cast<double>(dtype_size(dt));
    const int64_t n_base = std::clamp<int64_t>(static_cast<int64_t>(2.0 * 1073741824.0 / unwindowed_bytes), 1, n_sliding);
    std::vector<model::KvSlotShape> slots;
    for (int64_t i = 0; i < g.layers; ++i) slots.push_back(g.full(i) ? full : sliding);
    for (int64_t i = 0; i < n_base; ++i) slots.push_back(unwindowed);
    model::KvCache cache(slots, capacity, kPrefillChunk, dt);
    for (int64_t l = 0; l < static_cast<int64_t>(slots.size()); ++l) {
      // A ring only keeps its last rows: fill those (the rest would be overwritten).
      const int64_t lo = slots[static_cast<size_t>(l)].window > 0 ? std::max<int64_t>(0, capacity - cache.rows(l)) : 0;
      fill(cache, l, lo, capacity, rng);
    }
    cache.set_length(capacity);
    std::vector<float> q_s(static_cast<size_t>(g.heads * g.sliding_head_dim)), q_f(static_cast<size_t>(g.heads * g.full_head_dim));
    for (float& x : q_s) x = normal(rng);
    for (float& x : q_f) x = normal(rng);
    std::vector<float> out(std::max(q_s.size(), q_f.size()));
    auto run = [&](int64_t l, int64_t pos, const std::vector<float>& q) {
      const model::AttentionSpan span{&cache, 0, 1, pos};
      model::causal_attention(std::span<const model::AttentionSpan>(&span, 1), l, q.data(), g.heads, out.data(), pool,
                              &kern);
    };
    std::vector<double> t_sliding, t_full, t_base;
    for (int64_t r = 0; r <= reps; ++r) {
      const int64_t pos = P - 1 + r;
      double ms[3] = {0, 0, 0};
      for (int part = 0; part < 3; ++part) {
        const auto t0 = std::chrono::steady_clock::now();
        if (part == 2) {
          for (int64_t l = g.layers; l < g.layers + n_base; ++l) run(l, pos, q_s);
        } else {
          for (int64_t l = 0; l < g.layers; ++l)
            if (g.full(l) == (part == 1)) run(l, pos, part == 1 ? q_f : q_s);
        }
        ms[part] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      }
      if (r > 0) {
        t_sliding.push_back(ms[0]);
        t_full.push_back(ms[1]);
        t_base.push_back(ms[2] / static_cast<double>(n_base));
      }
    }
    const double s = median(t_sliding), f = median(t_full), b = median(t_base);
    const double total = s + f, unwindowed_total = b * static_cast<double>(n_sliding) + f;
    std::printf("positions %6lld  sliding %8.3f ms (%7.4f ms/layer)  full %8.3f ms (%7.4f ms/layer)  total %8.3f "
                "ms/token\n",
                static_cast<long long>(P), s, s / static_cast<double>(n_sliding), f, f / static_cast<double>(n_full),
                total);
    std::printf("                  same-run baseline: a sliding layer without its window %7.4f ms/layer (%lld layers "
                "measured) = %.2fx its windowed time; all %lld layers unwindowed %8.3f ms/token = %.2fx the total\n",
                b, static_cast<long long>(n_base), b / (s / static_cast<double>(n_sliding)),
                static_cast<long long>(g.layers), unwindowed_total, unwindowed_total / total);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t heads = 32, kv_heads = 4, hd = 128, layers = 48, rows = 1, reps = 7, threads = 0;
  std::vector<int64_t> positions = {500, 2000};
  std::string dtype = "bfloat16";
  std::vector<std::string> names;
  std::string gemma;
  bool positions_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    try {
      if (a == "--heads") heads = std::stoll(v);
      else if (a == "--kv-heads") kv_heads = std::stoll(v);
      else if (a == "--head-dim") hd = std::stoll(v);
      else if (a == "--layers") layers = std::stoll(v);
      else if (a == "--rows") rows = std::stoll(v);
      else if (a == "--reps") reps = std::stoll(v);
      else if (a == "--threads") threads = std::stoll(v);
      else if (a == "--dtype") dtype = v;
      else if (a == "--variants") names = split(v);
      else if (a == "--gemma4") gemma = v;
      else if (a == "--positions") {
        positions_given = true;
        positions.clear();
        for (const auto& s : split(v)) positions.push_back(std::stoll(s));
      } else {
        std::fprintf(stderr, "unknown option %s\n", a.c_str());
        return usage();
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "%s: not a number: %s\n", a.c_str(), v.c_str());
      return 2;
    }
  }
  const DType dt = dtype == "bfloat16" ? DType::BF16
                   : dtype == "float16" ? DType::F16
                   : dtype == "float32" ? DType::F32
                   : dtype == "fp8"     ? DType::F8_E4M3
                                        : DType::U8;
  if (dt == DType::U8 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || hd <= 0 || layers <= 0 ||
      rows <= 0 || reps <= 0 || positions.empty()) {
    std::fprintf(stderr, "bad --dtype, or a size that is not positive, or heads not a multiple of kv-heads\n");
    return 2;
  }
  for (int64_t p : positions)
    if (p < rows) {
      std::fprintf(stderr, "--positions must be >= --rows\n");
      return 2;
    }
  if (threads > 0) ThreadPool::set_global_threads(static_cast<int>(threads));
  if (!gemma.empty()) {
    static const GemmaShape k31b{"Gemma-4-31B", 60, 32, 16, 256, 4, 512, 1024};
    static const GemmaShape k26b{"Gemma-4-26B-A4B", 30, 16, 8, 256, 2, 512, 1024};
    if (gemma != "31b" && gemma != "26b-a4b") {
      std::fprintf(stderr, "--gemma4 must be 31b or 26b-a4b, got %s\n", gemma.c_str());
      return 2;
    }
    if (!positions_given) positions = {4096, 32768};
    return gemma_main(gemma == "31b" ? k31b : k26b, positions, dt, dtype, reps);
  }
  ThreadPool& pool = ThreadPool::global();
  if (names.empty()) {
    for (const kernels::AttentionKernel* k : kernels::attention_kernels())
      if (k->unavailable_reason().empty()) names.emplace_back(k->name);
  } else if (std::find(names.begin(), names.end(), "reference") == names.end()) {
    names.emplace_back("reference");  // the baseline
  }
  std::vector<const kernels::AttentionKernel*> variants;
  for (const std::string& n : names) {
    const kernels::AttentionKernel* k = kernels::find_attention_kernel(n);
    if (!k) {
      std::fprintf(stderr, "unknown variant %s\n", n.c_str());
      return 2;
    }
    if (std::string why = k->unavailable_reason(); !why.empty()) {
      std::fprintf(stderr, "variant %s unavailable: %s\n", n.c_str(), why.c_str());
      return 1;
    }
    variants.push_back(k);
  }

  std::printf("attention decode step: %lld query heads, %lld KV heads, head_dim %lld, %lld layers, %s cache, %lld row(s), "
              "%d threads, median of %lld\n",
              static_cast<long long>(heads), static_cast<long long>(kv_heads), static_cast<long long>(hd),
              static_cast<long long>(layers), dtype.c_str(), static_cast<long long>(rows), pool.size(),
              static_cast<long long>(reps));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t P : positions) {
    std::vector<float> ks, vs;
    if (dt == DType::F8_E4M3) {
      ks.assign(static_cast<size_t>(layers), 0.01f);
      vs.assign(static_cast<size_t>(layers), 0.01f);
    }
    model::KvCache cache(layers, kv_heads, hd, P, dt, ks, vs);
    std::vector<float> k(static_cast<size_t>(kv_heads * hd)), v(k.size());
    for (int64_t l = 0; l < layers; ++l)
      for (int64_t t = 0; t < P; ++t) {
        for (float& x : k) x = normal(rng);
        for (float& x : v) x = normal(rng);
        cache.store(l, t, k.data(), v.data());
      }
    std::vector<float> q(static_cast<size_t>(rows * heads * hd)), out(q.size());
    for (float& x : q) x = normal(rng);
    // KV bytes one layer reads (all its heads, K and V, P positions).
    const double kv_mib =
        static_cast<double>(cache.bytes_per_position()) * static_cast<double>(P) / static_cast<double>(layers) / 1048576.0;
    std::vector<double> med, cpu_med;
    for (const kernels::AttentionKernel* kern : variants) {
      std::vector<double> ms, cpu;
      for (int64_t r = 0; r <= reps; ++r) {
        const double c0 = cpu_ms();
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t l = 0; l < layers; ++l)
          model::causal_attention(cache, l, q.data(), rows, P - rows, heads, out.data(), pool, kern);
        const auto t1 = std::chrono::steady_clock::now();
        const double c1 = cpu_ms();
        if (r > 0) {
          ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          cpu.push_back(c1 - c0);
        }
      }
      std::sort(ms.begin(), ms.end());
      std::sort(cpu.begin(), cpu.end());
      med.push_back(ms[ms.size() / 2]);
      cpu_med.push_back(cpu[cpu.size() / 2]);
    }
    double base = 0, cpu_base = 0;  // the reference, measured in this run
    for (size_t i = 0; i < variants.size(); ++i)
      if (std::string(variants[i]->name) == "reference") {
        base = med[i];
        cpu_base = cpu_med[i];
      }
    for (size_t i = 0; i < variants.size(); ++i)
      std::printf("positions %5lld  %-9s  %8.3f ms/step  %7.4f ms/layer  %6.1f GB/s of KV  %5.2fx reference  "
                  "(cpu %8.3f ms/step, %5.2fx)\n",
                  static_cast<long long>(P), variants[i]->name, med[i], med[i] / static_cast<double>(layers),
                  kv_mib * 1048576.0 / (med[i] / static_cast<double>(layers) * 1e6), base / med[i], cpu_med[i],
                  cpu_base / cpu_med[i]);
  }
  return 0;
}
