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
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "model/attention.h"
#include "model/kv_cache.h"

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
               "                       [--variants a,b]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t heads = 32, kv_heads = 4, hd = 128, layers = 48, rows = 1, reps = 7, threads = 0;
  std::vector<int64_t> positions = {500, 2000};
  std::string dtype = "bfloat16";
  std::vector<std::string> names;
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
      else if (a == "--positions") {
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
