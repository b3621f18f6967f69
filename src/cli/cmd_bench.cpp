// `fp4lm bench kernels`: the CPU NVFP4 kernels against baselines measured in the same run —
// the machine's sustained read bandwidth (a buffer far larger than the caches) and OpenBLAS
// cblas_sgemm on fp32 weights of the same shape — printing ratios (docs/BENCHMARKS.md, Kernels).
// `--rss` instead measures resident memory over an mmapped NVFP4 layer set of >= 256 MiB.
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <numeric>
#include <fstream>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/command.h"
#include "cli/openblas.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/read_bandwidth.h"
#include "core/thread_pool.h"
#include "kernels/registry.h"

namespace fp4lm::cli {
namespace {

using Clock = std::chrono::steady_clock;
using kernels::LinearWeights;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Best time of `reps` runs of fn (at least min_total seconds of runs in all).
template <typename Fn>
double best_time(Fn&& fn, int reps, double min_total = 0.3) {
  double best = 1e30, total = 0;
  for (int r = 0; r < reps || total < min_total; ++r) {
    auto t0 = Clock::now();
    fn();
    double s = seconds_since(t0);
    best = std::min(best, s);
    total += s;
    if (r > 200) break;
  }
  return best;
}

// Random NVFP4 layer data: codes uniform, block scales in a realistic E4M3 range.
struct RandomLayer {
  std::vector<uint8_t> codes, scales;
};
RandomLayer random_layer(int64_t n, int64_t k, std::mt19937& rng) {
  RandomLayer l;
  l.codes.resize(static_cast<size_t>(n * k / 2));
  l.scales.resize(static_cast<size_t>(n * k / 16));
  for (size_t i = 0; i < l.codes.size(); i += 4) {
    uint32_t v = rng();
    std::memcpy(l.codes.data() + i, &v, std::min<size_t>(4, l.codes.size() - i));
  }
  for (auto& s : l.scales) s = static_cast<uint8_t>(0x28 + rng() % 0x20);
  return l;
}

// An n x k layer of one shard over `view` (the caller keeps the data alive).
LinearWeights one_shard_layer(kernels::QuantKey key, int64_t n, int64_t k, kernels::ShardView view) {
  LinearWeights w;
  w.key = key;
  w.n = n;
  w.k = k;
  kernels::WeightShard s;
  s.name = "bench";
  s.rows = n;
  s.view = view;
  w.shards.push_back(s);
  return w;
}

LinearWeights wrap(const RandomLayer& l, int64_t n, int64_t k, kernels::QuantKey key) {
  LinearWeights w = one_shard_layer(key, n, k, kernels::Nvfp4View{l.codes.data(), l.scales.data(), 1e-3f, 0.0f});
  w.input_scale = 1e-2f;
  return w;
}

// Best time of one call of a layer that has copies, each call on the next copy (so at M = 1 the
// weights come from memory, not the caches): 3 rounds over the copies at M = 1, else `reps`.
double rotating_time(const std::vector<std::unique_ptr<kernels::LinearKernel>>& copies, const void* x, int64_t m,
                     void* y, ThreadPool& pool, int reps) {
  size_t next = 0;
  return best_time([&] {
    copies[next]->forward(x, m, y, pool);
    next = (next + 1) % copies.size();
  }, m == 1 ? 3 * static_cast<int>(copies.size()) : reps);
}

struct Options {
  std::string threads = "1,2";
  std::string shapes = "quick";
  std::string ms;  // overrides the shape set's token counts when given
  bool rss = false;
  bool dense = false;
  bool fp8 = false;
  bool mxfp4 = false;
  bool int4 = false;
  bool keep_openblas_env = false;
  std::string act = "bfloat16";
  std::string w4a16_backend, w4a4_backend, dense_backend;
  int64_t llc_mib = 32;
};

std::vector<int> parse_list(const std::string& s, const char* what = "--threads") {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      out.push_back(std::stoi(item));
    } catch (...) {
      usage_fail("{}: '{}' is not a comma-separated list of integers", what, s);
    }
    if (out.back() < 1) usage_fail("{}: {} must be >= 1", what, out.back());
  }
  return out;
}

std::vector<int> parse_thread_counts(const std::string& s) {
  std::vector<int> out = parse_list(s, "--threads");
  for (int t : out)
    if (t > ThreadPool::max_threads())
      usage_fail("--threads: {} is more than the maximum {} (4 x the hardware threads)", t, ThreadPool::max_threads());
  return out;
}

DType activation_dtype(const std::string& name) {
  const auto t = parse_dtype(name);
  if (name == "float32" || name == "f32") return DType::F32;
  if (name == "bfloat16" || name == "bf16") return DType::BF16;
  if (name == "float16" || name == "f16") return DType::F16;
  if (t && (*t == DType::F32 || *t == DType::BF16 || *t == DType::F16)) return *t;
  usage_fail("--act: '{}', expected bfloat16, float16 or float32", name);
}

// The token counts (M) to run: --m when given, else `defaults`.
std::vector<int64_t> token_counts(const Options& o, std::vector<int64_t> defaults) {
  if (o.ms.empty()) return defaults;
  std::vector<int64_t> ms;
  for (int m : parse_list(o.ms, "--m")) ms.push_back(m);
  return ms;
}

// The layer shapes (N x K) and token counts (M) of --shapes quick|full (M overridden by --m).
struct BenchShapes {
  struct Shape {
    int64_t n, k;
  };
  std::vector<Shape> shapes;
  std::vector<int64_t> ms;
};
BenchShapes bench_shapes(const Options& o) {
  BenchShapes b;
  if (o.shapes == "quick") {
    b.shapes = {{4096, 4096}, {1536, 2048}};  // attention o/qkv-like, a MoE expert's w13
    b.ms = token_counts(o, {1, 16, 256});
  } else if (o.shapes == "full") {
    // attention; MLP up and down; MoE expert w13 and w2
    b.shapes = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {1536, 2048}, {2048, 768}};
    b.ms = token_counts(o, {1, 4, 16, 64, 256});
  } else {
    usage_fail("--shapes: '{}', expected quick or full", o.shapes);
  }
  return b;
}

// Starts one thread count's section of a table: the pool's read bandwidth (bytes/s), printed.
double begin_threads_section(int threads, ThreadPool& pool) {
  openblas().set_num_threads(threads);
  const double bw = read_bandwidth(size_t{1} << 30, 3, pool);
  fmt::print("\n== threads {}: read bandwidth {:.1f} GB/s (1 GiB buffer)\n", threads, bw / 1e9);
  return bw;
}

// The baseline of every table: OpenBLAS sgemm, y[m x n] = x[m x k] * w[n x k]^T in fp32.
double sgemm_seconds(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* y, int reps) {
  const auto sgemm = openblas().sgemm;
  return best_time([&] {
    sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f,
          x, static_cast<int>(k), w, static_cast<int>(k), 0.0f, y, static_cast<int>(n));
  }, reps);
}

// The tables' layout: N, K, M and the sgemm baseline (time, GFLOP/s), optionally one more
// baseline cell, then per kernel its time, GFLOP/s, xBLAS (sgemm time / its time) and, when it
// reads the weights from memory, xBW (weight bytes / its time / read bandwidth).
struct KernelColumn {
  std::string title;  // of the time column
  int width;          // of the time column
  bool xbw;
};

void print_table_header(const std::vector<KernelColumn>& cols, const std::string& extra = "") {
  fmt::print("{:>6} {:>6} {:>4} | {:>10} {:>8}", "N", "K", "M", "sgemm ms", "GFLOP/s");
  if (!extra.empty()) fmt::print(" | {:>10}", extra);
  for (const KernelColumn& c : cols) {
    fmt::print(" | {:>{}} {:>8} {:>6}", c.title, c.width, "GFLOP/s", "xBLAS");
    if (c.xbw) fmt::print(" {:>6}", "xBW");
  }
  fmt::print("\n");
}

// One row: `seconds` holds each column's kernel time; `weight_bytes` / `bw` feed xBW.
void print_table_row(const std::vector<KernelColumn>& cols, int64_t n, int64_t k, int64_t m, double t_blas,
                     const std::vector<double>& seconds, double weight_bytes = 0, double bw = 0,
                     const std::string& extra = "") {
  const double flops = 2.0 * m * n * k;
  fmt::print("{:>6} {:>6} {:>4} | {:>10.3f} {:>8.1f}", n, k, m, t_blas * 1e3, flops / t_blas / 1e9);
  if (!extra.empty()) fmt::print(" | {:>10}", extra);
  for (size_t c = 0; c < cols.size(); ++c) {
    const double t = seconds[c];
    fmt::print(" | {:>{}.3f} {:>8.1f} {:>6.2f}", t * 1e3, cols[c].width, flops / t / 1e9, t_blas / t);
    if (cols[c].xbw) fmt::print(" {:>6.2f}", weight_bytes / t / bw);
  }
  fmt::print("\n");
}

using KernelCopies = std::vector<std::unique_ptr<kernels::LinearKernel>>;

// Enough copies of a layer that one round over them is >= 4x the LLC: at M = 1 a call then reads
// its weights from memory, as a model's decode step does.
int rotation_copies(const Options& o, size_t layer_bytes) {
  return static_cast<int>(std::max<size_t>(1, (static_cast<size_t>(o.llc_mib) * 4 << 20) / layer_bytes + 1));
}

// Values in [-1, 1] in steps of 1e-3: the baseline's fp32 weights and every activation.
std::vector<float> random_values(size_t n, std::mt19937& rng) {
  std::vector<float> v(n);
  for (auto& e : v) e = static_cast<float>(rng() % 2001) * 1e-3f - 1.0f;
  return v;
}

// One shape's rows, one per M: the sgemm baseline on the fp32 weights `wf`, then each kernel set
// (rotating copies) on the same activations in `act`. Returns (M, each set's time) per row.
std::vector<std::pair<int64_t, std::vector<double>>> time_shape_rows(
    const std::vector<KernelColumn>& cols, const BenchShapes& bs, const BenchShapes::Shape& s,
    const std::vector<float>& wf, std::span<const KernelCopies> kern, DType act, size_t layer_bytes, double bw,
    ThreadPool& pool, std::mt19937& rng) {
  std::vector<std::pair<int64_t, std::vector<double>>> times;
  for (int64_t m : bs.ms) {
    const std::vector<float> x = random_values(static_cast<size_t>(m * s.k), rng);
    std::vector<float> y(static_cast<size_t>(m * s.n));
    std::vector<uint8_t> xa(x.size() * dtype_size(act)), ya(y.size() * dtype_size(act));
    from_f32_n(x.data(), act, xa.data(), x.size());
    const int reps = m >= 64 ? 3 : 10;
    const double t_blas = sgemm_seconds(m, s.n, s.k, x.data(), wf.data(), y.data(), reps);
    std::vector<double> t;
    for (const KernelCopies& kc : kern) t.push_back(rotating_time(kc, xa.data(), m, ya.data(), pool, reps));
    print_table_row(cols, s.n, s.k, m, t_blas, t, static_cast<double>(layer_bytes), bw);
    times.emplace_back(m, std::move(t));
  }
  return times;
}

// OpenBLAS's bf16 GEMM, when this OpenBLAS was built with it (Debian's is not).
using SbgemmFn = decltype(OpenBlas::sbgemm);
SbgemmFn bf16_gemm() { return openblas().sbgemm; }

void print_openblas() {
  fmt::print("OpenBLAS core: {} (OPENBLAS_CORETYPE {}, OPENBLAS_L2_SIZE {}); bf16 GEMM (cblas_sbgemm): {}\n",
             openblas().get_corename(), std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "unset",
             std::getenv("OPENBLAS_L2_SIZE") ? std::getenv("OPENBLAS_L2_SIZE") : "unset",
             bf16_gemm() ? "available" : "not in this OpenBLAS build");
}

// OpenBLAS reads OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE when it loads, so measuring its best
// kernel for this CPU means running without them: the benchmark re-executes itself once with
// both removed (only this process: nothing else sees the change). --keep-openblas-env skips it.
void reexec_without_openblas_env(const Options& o) {
  if (o.keep_openblas_env || (!std::getenv("OPENBLAS_CORETYPE") && !std::getenv("OPENBLAS_L2_SIZE"))) return;
  ::unsetenv("OPENBLAS_CORETYPE");
  ::unsetenv("OPENBLAS_L2_SIZE");
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end - at));
    at = end == std::string::npos ? all.size() : end + 1;
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execv("/proc/self/exe", argv.data());
  fail("bench: re-executing without the OpenBLAS variables failed: {}", std::strerror(errno));
}

int run_kernels(const Options& o) {
  const std::vector<int> thread_counts = parse_thread_counts(o.threads);
  const BenchShapes bs = bench_shapes(o);
  const kernels::QuantKey keys[2] = {kernels::kNvfp4W4A16, kernels::kNvfp4W4A4};
  const DType act = activation_dtype(o.act);
  // The oracle's choice for each scheme (as for a model's layers), or the forced names.
  std::string names[2] = {o.w4a16_backend, o.w4a4_backend};
  for (int b = 0; b < 2; ++b) {
    const auto sel = kernels::select_linear({keys[b], act, 4096, 4096, {}}, "bench", names[b]);
    names[b] = sel.backend->name;
  }
  fmt::print("cpu: {} ({} cores)\n", cpu_features().describe(), cpu_features().physical_cores);
  fmt::print("backends: w4a16 = {}, w4a4 = {}; activations {}\n", names[0], names[1], dtype_torch_name(act));
  print_openblas();
  const std::vector<KernelColumn> cols = {{"w4a16 ms", 9, true}, {"w4a4 ms", 9, true}};
  std::mt19937 rng(1);
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    const double bw = begin_threads_section(threads, pool);
    print_table_header(cols);
    for (const BenchShapes::Shape& s : bs.shapes) {
      const size_t layer_bytes = static_cast<size_t>(s.n * (s.k / 2 + s.k / 16));
      const int copies = rotation_copies(o, layer_bytes);
      std::vector<RandomLayer> layers;
      for (int c = 0; c < copies; ++c) layers.push_back(random_layer(s.n, s.k, rng));
      const std::vector<float> wf = random_values(static_cast<size_t>(s.n * s.k), rng);
      KernelCopies kern[2];
      for (int b = 0; b < 2; ++b) {
        const kernels::Backend* be = kernels::find_backend(names[b], kernels::LayerKind::linear);
        for (auto& l : layers)
          kern[b].push_back(be->make_linear(wrap(l, s.n, s.k, keys[b]), {keys[b], act, s.n, s.k, {}}));
      }
      // (M, per kernel) for the xM1 line
      const auto times = time_shape_rows(cols, bs, s, wf, kern, act, layer_bytes, bw, pool, rng);
      // What a call of M tokens costs against one of 1 token (batched decode: M streams' steps).
      if (times.size() > 1 && times.front().first == 1) {
        fmt::print("{:>6} {:>6}  call cost / M=1:", s.n, s.k);
        for (int b = 0; b < 2; ++b) {
          fmt::print(" {}", b == 0 ? "w4a16" : " w4a4");
          for (size_t i = 1; i < times.size(); ++i)
            fmt::print(" M{} {:.2f}x", times[i].first, times[i].second[b] / times.front().second[b]);
        }
        fmt::print("\n");
      }
    }
  }
  fmt::print("\nxBLAS = sgemm time / kernel time (same shape, fp32 weights, same threads); "
             "xBW = (NVFP4 weight bytes / kernel time) / read bandwidth.\n");
  if (bf16_gemm()) fmt::print("bf16 GEMM baseline (cblas_sbgemm): `fp4lm bench kernels --dense`.\n");
  return 0;
}

// The dense backend (unquantized weights; the oracle's choice or --dense-backend) against the same baselines: bf16 and fp32 weights, an
// lm_head-sized M=1 GEMV (151936 x 2048 bf16 = 594 MiB, read from memory) and a 4096 x 4096
// layer over M.
int run_dense(const Options& o) {
  const std::vector<int> thread_counts = parse_thread_counts(o.threads);
  const std::vector<int64_t> ms = token_counts(o, {1, 16, 256});
  const DType act = activation_dtype(o.act);
  const kernels::Backend* be =
      kernels::select_linear({kernels::kUnquantized, act, 4096, 4096, {}}, "bench", o.dense_backend).backend;
  fmt::print("cpu: {} ({} cores)\n", cpu_features().describe(), cpu_features().physical_cores);
  fmt::print("backend: {}; activations {}\n", be->name, dtype_torch_name(act));
  print_openblas();
  const SbgemmFn sbgemm = bf16_gemm();
  std::mt19937 rng(2);
  auto make = [&](int64_t n, int64_t k, DType t, std::vector<uint8_t>& store) {
    store.resize(static_cast<size_t>(n * k) * dtype_size(t));
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t r = 0; r < n; ++r) {
      for (auto& v : row) v = static_cast<float>(rng() % 2001) * 1e-3f - 1.0f;
      from_f32_n(row.data(), t, store.data() + r * k * dtype_size(t), row.size());
    }
    return be->make_linear(one_shard_layer(kernels::kUnquantized, n, k, kernels::DenseView{t, store.data()}),
                           {kernels::kUnquantized, act, n, k, {}});
  };
  const std::vector<KernelColumn> cols = {{"f32 ms", 9, false}, {"bf16 ms", 9, false}};
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    const double bw = begin_threads_section(threads, pool);
    {  // lm_head GEMV: 594 MiB of bf16 weights, far larger than the caches.
      const int64_t n = 151936, k = 2048;
      std::vector<uint8_t> store;
      auto kern = make(n, k, DType::BF16, store);
      std::vector<float> x(static_cast<size_t>(k), 0.5f), y(static_cast<size_t>(n));
      std::vector<uint8_t> xa(x.size() * dtype_size(act)), ya(y.size() * dtype_size(act));
      from_f32_n(x.data(), act, xa.data(), x.size());
      const double t = best_time([&] { kern->forward(xa.data(), 1, ya.data(), pool); }, 5);
      fmt::print("lm_head {} x {} bf16, M=1: {:.2f} ms, {:.1f} GB/s of weights = {:.2f} x read bandwidth\n", n, k,
                 t * 1e3, store.size() / t / 1e9, store.size() / t / bw);
    }
    const int64_t n = 4096, k = 4096;
    print_table_header(cols, "sbgemm GF");
    std::vector<uint8_t> s32, s16;
    auto k32 = make(n, k, DType::F32, s32);
    auto k16 = make(n, k, DType::BF16, s16);
    const float* wf = reinterpret_cast<const float*>(s32.data());
    for (int64_t m : ms) {
      const std::vector<float> x = random_values(static_cast<size_t>(m * k), rng);
      std::vector<float> y(static_cast<size_t>(m * n));
      std::vector<uint8_t> xa(x.size() * dtype_size(act)), ya(y.size() * dtype_size(act));
      from_f32_n(x.data(), act, xa.data(), x.size());
      const double flops = 2.0 * m * n * k;
      const int reps = m >= 64 ? 3 : 10;
      double t_sb = 0;
      if (sbgemm) {
        std::vector<uint16_t> xb(x.size());
        from_f32_n(x.data(), DType::BF16, xb.data(), x.size());
        const auto* wb = reinterpret_cast<const uint16_t*>(s16.data());
        t_sb = best_time([&] {
          sbgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m), static_cast<blasint>(n),
                 static_cast<blasint>(k), 1.0f, xb.data(), static_cast<blasint>(k), wb, static_cast<blasint>(k), 0.0f,
                 y.data(), static_cast<blasint>(n));
        }, reps);
      }
      const double tb = sgemm_seconds(m, n, k, x.data(), wf, y.data(), reps);
      const double t32 = best_time([&] { k32->forward(xa.data(), m, ya.data(), pool); }, reps);
      const double t16 = best_time([&] { k16->forward(xa.data(), m, ya.data(), pool); }, reps);
      print_table_row(cols, n, k, m, tb, {t32, t16}, 0, 0, sbgemm ? fmt::format("{:.1f}", flops / t_sb / 1e9) : "n/a");
    }
  }
  return 0;
}

// The FP8 W8A16 backends (cpu_fp8_w8a16_avx2 / _avx512, whichever the CPU runs) on E4M3
// weights against the same baselines: M=1 GEMV over layer copies >= 4x the LLC (weights read
// from memory, 1 byte each: xBW = weight bytes / time / read bandwidth) and M > 1 vs sgemm.
int run_fp8(const Options& o) {
  const std::vector<int> thread_counts = parse_list(o.threads);
  const BenchShapes bs = bench_shapes(o);
  std::vector<const kernels::Backend*> backends;
  for (const char* name : {"cpu_fp8_w8a16_avx2", "cpu_fp8_w8a16_avx512"}) {
    const kernels::Backend* b = kernels::find_backend(name, kernels::LayerKind::linear);
    if (b && b->unavailable_reason().empty()) backends.push_back(b);
  }
  if (backends.empty()) fail("no FP8 CPU backend can run on this CPU ({})", cpu_features().describe());
  fmt::print("cpu: {} ({} cores)\n", cpu_features().describe(), cpu_features().physical_cores);
  // Per backend: per-tensor FP8, then block-wise FP8 (128x128 weight_scale_inv) on the same codes,
  // with float32 scales (DeepSeek's grids) and with bf16-exact ones (Qwen3-FP8's, compressed-tensors').
  std::vector<KernelColumn> cols;
  for (const kernels::Backend* b : backends) {
    cols.push_back({b->name + " ms", 22, true});
    cols.push_back({b->name + " block ms", 28, true});
    cols.push_back({b->name + " block-bf16 ms", 33, true});
  }
  std::mt19937 rng(3);
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    const double bw = begin_threads_section(threads, pool);
    print_table_header(cols);
    for (const BenchShapes::Shape& s : bs.shapes) {
      const size_t layer_bytes = static_cast<size_t>(s.n * s.k);
      const int copies = rotation_copies(o, layer_bytes);
      std::vector<std::vector<uint8_t>> codes(static_cast<size_t>(copies));
      for (auto& c : codes) {
        c.resize(layer_bytes);
        for (auto& v : c) {
          v = static_cast<uint8_t>(rng());
          if ((v & 0x7f) == 0x7f) v = 0x3f;  // no NaN codes
        }
      }
      const std::vector<float> wf = random_values(static_cast<size_t>(s.n * s.k), rng);
      std::vector<KernelCopies> kern(3 * backends.size());
      for (size_t b = 0; b < backends.size(); ++b)
        for (auto& c : codes) {
          kernels::Fp8View v;
          v.codes = c.data();
          v.global_scale = 1e-3f;
          kern[3 * b].push_back(backends[b]->make_linear(one_shard_layer(kernels::kFp8W8A16, s.n, s.k, v),
                                                         {kernels::kFp8W8A16, DType::BF16, s.n, s.k, {}}));
          kernels::Fp8BlockView bv;
          bv.codes = c.data();
          bv.block_n = bv.block_k = 128;
          bv.scale_cols = (s.k + 127) / 128;
          bv.scales.resize(static_cast<size_t>((s.n + 127) / 128 * bv.scale_cols));
          for (auto& sc : bv.scales) sc = 1e-3f * (1.0f + static_cast<float>(rng() % 100) * 1e-2f);
          kernels::Fp8BlockView bv16 = bv;
          for (auto& sc : bv16.scales) sc = bf16_to_f32(f32_to_bf16(sc));
          kern[3 * b + 1].push_back(backends[b]->make_linear(
              one_shard_layer(kernels::kFp8BlockW8A16, s.n, s.k, bv), {kernels::kFp8BlockW8A16, DType::BF16, s.n, s.k, {}}));
          kern[3 * b + 2].push_back(backends[b]->make_linear(one_shard_layer(kernels::kFp8BlockW8A16, s.n, s.k, bv16),
                                                             {kernels::kFp8BlockW8A16, DType::BF16, s.n, s.k, {}}));
        }
      time_shape_rows(cols, bs, s, wf, kern, DType::BF16, layer_bytes, bw, pool, rng);
    }
  }
  fmt::print("\nbf16 activations. xBLAS = sgemm time / kernel time (fp32 weights, same threads); "
             "xBW = (FP8 weight bytes / kernel time) / read bandwidth (target at M=1: >= 0.75); block = the same "
             "codes with 128x128 block scales (float32 values; block-bf16: bf16-exact values).\n");
  return 0;
}

// MXFP4 (codes + one E8M0 scale per 32, as gpt-oss stores them) on the W4A16 backends that run it
// (through the exact NVFP4 re-expression): the same baselines and xBW on MXFP4's bytes (k/2 + k/32).
int run_mxfp4(const Options& o) {
  const std::vector<int> thread_counts = parse_list(o.threads);
  const BenchShapes bs = bench_shapes(o);
  std::vector<const kernels::Backend*> backends;
  for (const char* name : {"cpu_w4a16_avx2", "cpu_w4a16_avx512", "cpu_w4a16_avx512_gemm"}) {
    const kernels::Backend* b = kernels::find_backend(name, kernels::LayerKind::linear);
    if (b && b->unavailable_reason().empty() && b->supports(kernels::kMxfp4W4A16)) backends.push_back(b);
  }
  if (backends.empty()) fail("no MXFP4 CPU backend can run on this CPU ({})", cpu_features().describe());
  fmt::print("cpu: {} ({} cores)\n", cpu_features().describe(), cpu_features().physical_cores);
  std::vector<KernelColumn> cols;
  for (const kernels::Backend* b : backends) cols.push_back({b->name + " mxfp4 ms", 24, true});
  std::mt19937 rng(4);
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    const double bw = begin_threads_section(threads, pool);
    print_table_header(cols);
    for (const BenchShapes::Shape& s : bs.shapes) {
      const size_t layer_bytes = static_cast<size_t>(s.n * (s.k / 2 + s.k / 32));
      const int copies = rotation_copies(o, layer_bytes);
      std::vector<RandomLayer> layers;
      std::vector<std::vector<uint8_t>> e8m0(static_cast<size_t>(copies));
      for (int c = 0; c < copies; ++c) {
        layers.push_back(random_layer(s.n, s.k, rng));
        e8m0[c].resize(static_cast<size_t>(s.n * s.k / 32));
        for (auto& v : e8m0[c]) v = static_cast<uint8_t>(116 + rng() % 8);
      }
      const std::vector<float> wf = random_values(static_cast<size_t>(s.n * s.k), rng);
      std::vector<KernelCopies> kern(backends.size());
      for (size_t b = 0; b < backends.size(); ++b)
        for (int c = 0; c < copies; ++c)
          kern[b].push_back(backends[b]->make_linear(
              one_shard_layer(kernels::kMxfp4W4A16, s.n, s.k, kernels::Mxfp4View{layers[c].codes.data(), e8m0[c].data()}),
              {kernels::kMxfp4W4A16, DType::BF16, s.n, s.k, {}}));
      time_shape_rows(cols, bs, s, wf, kern, DType::BF16, layer_bytes, bw, pool, rng);
    }
  }
  fmt::print("\nbf16 activations. xBLAS = sgemm time / kernel time (fp32 weights, same threads); "
             "xBW = (MXFP4 bytes, k/2 + k/32 per row, / kernel time) / read bandwidth.\n");
  return 0;
}

// Group-quantized int4 (GPTQ / AWQ / compressed-tensors after loading) vs NVFP4 W4A16 on the same
// ISA in the same run, decode-shaped: Llama-3-8B's MLP up (14336 x 4096) and down (4096 x 14336)
// and a Qwen3-30B-A3B expert's gate+up (1536 x 2048) and down (2048 x 768), at M = 1 and 8 (--m
// overrides); int4 as group 128 asymmetric, group 128 symmetric with act-order, group 64 and 32
// asymmetric. xBW = the bytes the kernel holds and reads (LinearKernel::weight_bytes) / its time /
// read bandwidth.
int run_int4(const Options& o) {
  const std::vector<int> thread_counts = parse_list(o.threads);
  std::vector<int64_t> ms = {1, 8};
  if (!o.ms.empty()) {
    ms.clear();
    for (int m : parse_list(o.ms, "--m")) ms.push_back(m);
  }
  std::vector<std::pair<const kernels::Backend*, const kernels::Backend*>> pairs;  // {nvfp4, int4}
  for (const char* isa : {"avx512", "avx2"}) {
    const kernels::Backend* nv = kernels::find_backend(fmt::format("cpu_w4a16_{}", isa), kernels::LayerKind::linear);
    const kernels::Backend* i4 = kernels::find_backend(fmt::format("cpu_int4_w4a16_{}", isa), kernels::LayerKind::linear);
    if (nv && i4 && nv->unavailable_reason().empty() && i4->unavailable_reason().empty()) pairs.emplace_back(nv, i4);
  }
  if (pairs.empty()) fail("no int4 CPU backend can run on this CPU ({})", cpu_features().describe());
  fmt::print("cpu: {} ({} cores)\n", cpu_features().describe(), cpu_features().physical_cores);
  const std::vector<BenchShapes::Shape> shapes = {{14336, 4096}, {4096, 14336}, {1536, 2048}, {2048, 768}};
  struct Variant {
    int64_t group;
    bool symmetric, act_order;
    const char* name;
  };
  const Variant variants[] = {{128, false, false, "g128"}, {128, true, true, "g128 sym ao"}, {64, false, false, "g64"},
                              {32, false, false, "g32"}};
  std::mt19937 rng(5);
  for (int threads : thread_counts) {
    ThreadPool pool(threads);
    const double bw = begin_threads_section(threads, pool);
    fmt::print("{:>11} {:>6} {:>6} {:>3}", "int4", "N", "K", "M");
    for (const auto& [nv, i4] : pairs)
      fmt::print(" | {:>18} {:>5} | {:>22} {:>5} | {:>10}", nv->name + " ms", "xBW", i4->name + " ms", "xBW",
                 "int4/nvfp4");
    fmt::print("\n");
    for (const Variant& var : variants) {
      for (const BenchShapes::Shape& s : shapes) {
        const int64_t group = var.group, groups = s.k / group;
        const size_t nv_bytes = static_cast<size_t>(s.n * (s.k / 2 + s.k / 16));
        const int copies = rotation_copies(o, nv_bytes);
        std::vector<RandomLayer> nv_layers;
        for (int c = 0; c < copies; ++c) nv_layers.push_back(random_layer(s.n, s.k, rng));
        std::vector<std::vector<KernelCopies>> kern(pairs.size());
        for (auto& kp : kern) kp.resize(2);
        for (int c = 0; c < copies; ++c) {
          kernels::Int4View v;
          v.group = group;
          v.codes = nv_layers[c].codes;  // random bytes: any nibble is a valid int4 code
          v.scales.resize(static_cast<size_t>(s.n * groups));
          v.zeros.resize(v.scales.size());
          for (size_t i = 0; i < v.scales.size(); ++i) {
            v.scales[i] = 1e-3f * (1.0f + static_cast<float>(rng() % 100) * 1e-2f);
            v.zeros[i] = static_cast<uint8_t>(var.symmetric ? 8 : rng() % 16);
          }
          if (var.act_order) {
            v.perm.resize(static_cast<size_t>(s.k));
            std::iota(v.perm.begin(), v.perm.end(), 0);
            std::shuffle(v.perm.begin(), v.perm.end(), rng);
          }
          for (size_t p = 0; p < pairs.size(); ++p) {
            kern[p][0].push_back(pairs[p].first->make_linear(wrap(nv_layers[c], s.n, s.k, kernels::kNvfp4W4A16),
                                                             {kernels::kNvfp4W4A16, DType::BF16, s.n, s.k, {}}));
            kern[p][1].push_back(pairs[p].second->make_linear(one_shard_layer(kernels::kInt4W4A16, s.n, s.k, v),
                                                              {kernels::kInt4W4A16, DType::BF16, s.n, s.k, {}}));
          }
        }
        for (int64_t m : ms) {
          const std::vector<float> x = random_values(static_cast<size_t>(m * s.k), rng);
          std::vector<uint8_t> xa(x.size() * 2), ya(static_cast<size_t>(m * s.n) * 2);
          from_f32_n(x.data(), DType::BF16, xa.data(), x.size());
          fmt::print("{:>11} {:>6} {:>6} {:>3}", var.name, s.n, s.k, m);
          for (size_t p = 0; p < pairs.size(); ++p) {
            double t[2], xbw[2];
            for (int f = 0; f < 2; ++f) {
              t[f] = rotating_time(kern[p][f], xa.data(), m, ya.data(), pool, 10);
              xbw[f] = static_cast<double>(kern[p][f][0]->weight_bytes()) / t[f] / bw;
            }
            fmt::print(" | {:>18.3f} {:>5.2f} | {:>22.3f} {:>5.2f} | {:>10.2f}", t[0] * 1e3, xbw[0], t[1] * 1e3, xbw[1],
                       t[1] / t[0]);
          }
          fmt::print("\n");
        }
      }
    }
  }
  fmt::print("\nbf16 activations; int4 held as the backend keeps it (weight_bytes: the repacked layout's padded "
             "codes, fp32 scales and zero points, docs/KERNELS.md) (sym: zero 8; ao: "
             "a random act-order permutation). xBW = weight bytes held / kernel time / read bandwidth; int4/nvfp4 = "
             "time ratio.\n");
  return 0;
}

// VmHWM / VmRSS of this process, in bytes.
std::pair<size_t, size_t> memory_status() {
  std::ifstream f("/proc/self/status");
  std::string line;
  size_t hwm = 0, rss = 0;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) hwm = std::stoull(line.substr(6)) * 1024;
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stoull(line.substr(6)) * 1024;
  }
  return {hwm, rss};
}

// Peak resident memory while preparing and running both backends over an mmapped layer set of
// 8 × [4096, 16384] NVFP4 layers (288 MiB of codes + scales).
int run_rss() {
  const int64_t n = 4096, k = 16384, layers = 8;
  const size_t codes = n * k / 2, scales = n * k / 16, per = codes + scales;
  const std::string path = fmt::format("/tmp/fp4lm_bench_rss_{}.bin", static_cast<long>(getpid()));
  {
    std::ofstream f(path, std::ios::binary);
    std::mt19937 rng(3);
    std::vector<uint8_t> chunk(per);
    for (int64_t l = 0; l < layers; ++l) {
      for (size_t i = 0; i < codes; ++i) chunk[i] = static_cast<uint8_t>(rng());
      for (size_t i = codes; i < per; ++i) chunk[i] = static_cast<uint8_t>(0x28 + rng() % 0x20);
      f.write(reinterpret_cast<const char*>(chunk.data()), static_cast<std::streamsize>(per));
    }
    if (!f) fail("cannot write {}", path);
  }
  const auto [hwm0, rss0] = memory_status();
  size_t hwm1 = 0;
  {
    auto map = std::make_shared<MappedFile>(path);
    std::remove(path.c_str());  // the mapping keeps the data
    ThreadPool pool(2);
    std::vector<std::unique_ptr<kernels::LinearKernel>> kern;
    for (int64_t l = 0; l < layers; ++l) {
      for (auto key : {kernels::kNvfp4W4A16, kernels::kNvfp4W4A4}) {
        LinearWeights w;
        w.key = key;
        w.n = n;
        w.k = k;
        kernels::WeightShard s;
        s.name = fmt::format("layer{}", l);
        s.rows = n;
        s.view = kernels::Nvfp4View{map->data() + l * per, map->data() + l * per + codes, 1e-3f, 0.0f};
        w.shards.push_back(s);
        w.input_scale = 1e-2f;
        w.keepalive = map;
        auto sel = kernels::select_linear({key, DType::BF16, n, k, {}}, s.name);
        kern.push_back(sel.backend->make_linear(std::move(w), {key, DType::BF16, n, k, {}}));
      }
    }
    std::vector<uint16_t> x(16 * k, 0x3f80), y(16 * n);
    for (auto& kr : kern) {
      kr->forward(x.data(), 1, y.data(), pool);
      kr->forward(x.data(), 16, y.data(), pool);
    }
    hwm1 = memory_status().first;
  }
  const double weight_bytes = static_cast<double>(per * layers);
  fmt::print("weights: {:.1f} MiB mmapped NVFP4 ({} layers [{}, {}]), both backends prepared and run\n",
             weight_bytes / (1 << 20), layers, n, k);
  fmt::print("RSS before mapping: {:.1f} MiB (VmHWM {:.1f} MiB); peak VmHWM after: {:.1f} MiB\n",
             rss0 / 1048576.0, hwm0 / 1048576.0, hwm1 / 1048576.0);
  fmt::print("peak RSS growth / weight bytes = {:.3f} (target <= 1.15)\n",
             (static_cast<double>(hwm1) - static_cast<double>(rss0)) / weight_bytes);
  return 0;
}

CommandRegistration reg("bench", "Benchmarks: `fp4lm bench kernels` (CPU NVFP4 kernels vs baselines)",
                        [](CLI::App& sub) {
  auto opts = std::make_shared<Options>();
  sub.require_subcommand(1);
  CLI::App* k = sub.add_subcommand("kernels", "NVFP4 W4A16/W4A4 kernels vs read bandwidth and OpenBLAS sgemm");
  k->add_option("--threads", opts->threads, "comma-separated thread counts")->capture_default_str();
  k->add_option("--shapes", opts->shapes, "quick or full")->capture_default_str();
  k->add_option("--llc-mib", opts->llc_mib, "last-level cache size; M=1 rotates over >= 4x this")
      ->capture_default_str();
  k->add_option("--m", opts->ms, "comma-separated token counts (default: the shape set's)");
  k->add_flag("--rss", opts->rss, "measure peak RSS over a 288 MiB mmapped layer set instead");
  k->add_flag("--dense", opts->dense, "the unquantized (dense) backend (bf16/f32 weights) instead");
  k->add_flag("--fp8", opts->fp8, "the FP8 W8A16 backends (E4M3 weights, bf16 activations) instead");
  k->add_flag("--mxfp4", opts->mxfp4, "MXFP4 weights (E8M0 scale per 32) on the W4A16 backends instead");
  k->add_flag("--int4", opts->int4,
              "int4 W4A16 (groups 32-128, sym / asym, act-order) vs NVFP4 W4A16, Llama-3-8B MLP and MoE expert shapes");
  k->add_option("--act", opts->act, "activation dtype: bfloat16, float16 or float32")->capture_default_str();
  k->add_option("--w4a16-backend", opts->w4a16_backend, "force the W4A16 backend (default: the oracle's choice)");
  k->add_option("--w4a4-backend", opts->w4a4_backend, "force the W4A4 backend (default: the oracle's choice)");
  k->add_option("--dense-backend", opts->dense_backend, "force the dense backend (default: the oracle's choice)");
  k->add_flag("--keep-openblas-env", opts->keep_openblas_env,
              "measure sgemm with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE as set (default: re-run without them)");
  return [opts]() -> int {
    if (!opts->rss) reexec_without_openblas_env(*opts);
    return opts->rss ? run_rss() : opts->dense ? run_dense(*opts) : opts->fp8 ? run_fp8(*opts)
                                                          : opts->mxfp4 ? run_mxfp4(*opts)
                                                          : opts->int4  ? run_int4(*opts)
                                                                        : run_kernels(*opts);
  };
});

}  // namespace
}  // namespace fp4lm::cli
