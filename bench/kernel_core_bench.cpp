// Per-core kernel throughput on cache-resident weights, in thread CPU time: what one core's
// instruction stream sustains, independent of memory bandwidth and robust on a shared machine
// (time while descheduled is not counted). One thread; every registered NVFP4, FP8, int4 and int8 Linear
// backend available here (or --backends a,b), bfloat16 activations, against OpenBLAS sgemm on the
// same shape (fp32 weights, 1 thread, its best core unless OPENBLAS_CORETYPE is set). FP8
// backends run E4M3 codes (1 byte per weight) of the same shape, int8 backends int8 codes with a scale
// per row; int4 backends group 128 with zero points (--group overrides). Dense backends
// (cpu_dense_*, named with --backends) run bf16 weights of the same shape.
//
//   kernel_core_bench [--n 2048] [--k 2048] [--m 1,4,16,256] [--backends NAME,NAME]
// Prints G multiply-adds per second per core (GMAC/s) and the ratio to sgemm.
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/registry.h"
#include "bench_clock.h"

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);

namespace {

using namespace fp4lm;

// Best of 7 rounds of calls, each round about 20 M multiply-adds or more.
template <typename Fn>
double best_seconds_per_call(Fn&& fn, double macs) {
  const int calls = static_cast<int>(std::max(1.0, 2e7 / macs));
  double best = 1e30;
  for (int round = 0; round < 7; ++round) {
    const double t0 = thread_cpu_seconds();
    for (int i = 0; i < calls; ++i) fn();
    best = std::min(best, (thread_cpu_seconds() - t0) / calls);
  }
  return best;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 2048, k = 2048, group = 128;
  std::vector<int64_t> ms = {1, 4, 16, 256};
  std::vector<std::string> names;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: kernel_core_bench [--n N] [--k K] [--m 1,4,16,256] [--group G] [--backends a,b]\n");
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--n") n = std::stoll(v);
    else if (a == "--k") k = std::stoll(v);
    else if (a == "--group") group = std::stoll(v);
    else if (a == "--m") {
      ms.clear();
      for (const auto& s : split(v)) ms.push_back(std::stoll(s));
    } else if (a == "--backends") names = split(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (n <= 0 || k <= 0 || k % 16 != 0 || group <= 0 || k % group != 0) {
    std::fprintf(stderr, "--n must be > 0, --k a positive multiple of 16 and --group divide it\n");
    return 2;
  }
  if (names.empty())
    for (const kernels::Backend* b : kernels::backends(kernels::LayerKind::linear))
      if (b->name != "reference" &&
          (b->supports(kernels::kNvfp4W4A4) || b->supports(kernels::kNvfp4W4A16) || b->supports(kernels::kFp8W8A16) ||
           b->supports(kernels::kInt4W4A16) || b->supports(kernels::kInt8W8A16)) &&
          (!b->unavailable_reason || b->unavailable_reason().empty()))
        names.push_back(b->name);

  std::mt19937 rng(1);
  std::vector<uint8_t> codes(static_cast<size_t>(n * k / 2)), scales(static_cast<size_t>(n * k / 16));
  for (auto& c : codes) c = static_cast<uint8_t>(rng());
  for (auto& s : scales) s = static_cast<uint8_t>(0x28 + rng() % 0x20);
  std::vector<uint8_t> fp8(static_cast<size_t>(n * k));
  for (auto& c : fp8) c = static_cast<uint8_t>(0x20 + rng() % 0x40) | static_cast<uint8_t>(rng() & 0x80);  // no NaN
  std::vector<float> wf(static_cast<size_t>(n * k));
  for (auto& v : wf) v = static_cast<float>(rng() % 2001) * 1e-3f - 1.0f;
  std::vector<uint16_t> wb(wf.size());  // the dense backends' bf16 weights (the same values)
  from_f32_n(wf.data(), DType::BF16, wb.data(), wf.size());
  ThreadPool pool(1);
  openblas_set_num_threads(1);
  std::printf("n %lld, k %lld (%.2f MiB NVFP4), 1 thread, bfloat16 activations, thread CPU time; sgemm: OpenBLAS %s\n",
              static_cast<long long>(n), static_cast<long long>(k), (codes.size() + scales.size()) / 1048576.0,
              openblas_get_corename());
  for (int64_t m : ms) {
    std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
    for (auto& v : x) v = static_cast<float>(rng() % 2001) * 1e-3f - 1.0f;
    std::vector<uint16_t> xb(x.size()), yb(y.size());
    from_f32_n(x.data(), DType::BF16, xb.data(), x.size());
    const double macs = static_cast<double>(m) * n * k;
    const double t_blas = best_seconds_per_call([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                  1.0f, x.data(), static_cast<int>(k), wf.data(), static_cast<int>(k), 0.0f, y.data(), static_cast<int>(n));
    }, macs);
    std::printf("m %4lld | sgemm %6.1f GMAC/s", static_cast<long long>(m), macs / t_blas / 1e9);
    for (const std::string& name : names) {
      const kernels::Backend* b = kernels::find_backend(name, kernels::LayerKind::linear);
      if (!b) {
        std::fprintf(stderr, "unknown backend %s\n", name.c_str());
        return 2;
      }
      const bool is_fp8 = b->supports(kernels::kFp8W8A16), is_int4 = b->supports(kernels::kInt4W4A16),
                 is_int8 = b->supports(kernels::kInt8W8A16), is_dense = b->supports(kernels::kUnquantized);
      const kernels::QuantKey key = is_dense  ? kernels::kUnquantized
                                    : is_fp8  ? kernels::kFp8W8A16
                                    : is_int8 ? kernels::kInt8W8A16
                                    : is_int4 ? kernels::kInt4W4A16
                                    : b->supports(kernels::kNvfp4W4A4) && !b->weight_key_only ? kernels::kNvfp4W4A4
                                                                                               : kernels::kNvfp4W4A16;
      kernels::LinearWeights w;
      w.key = key;
      w.n = n;
      w.k = k;
      kernels::WeightShard s;
      s.name = "bench";
      s.rows = n;
      if (is_dense) {
        s.view = kernels::DenseView{DType::BF16, wb.data()};
      } else if (is_int4) {
        kernels::Int4View v;
        v.group = group;
        v.codes = codes;
        for (int64_t g = 0; g < n * (k / group); ++g) {
          v.scales.push_back(1e-3f * static_cast<float>(1 + g % 7));
          v.zeros.push_back(static_cast<uint8_t>(g % 16));
        }
        s.view = std::move(v);
      } else if (is_int8) {
        kernels::Int8View v;
        v.codes = reinterpret_cast<const int8_t*>(fp8.data());  // any bytes are int8 codes
        v.row_scales.assign(static_cast<size_t>(n), 1e-3f);
        s.view = std::move(v);
      } else if (is_fp8) {
        kernels::Fp8View v;
        v.codes = fp8.data();
        v.global_scale = 1e-3f;
        s.view = v;
      } else {
        s.view = kernels::Nvfp4View{codes.data(), scales.data(), 1e-3f, 1e-2f};
      }
      w.shards.push_back(s);
      w.input_scale = 1e-2f;
      auto kern = b->make_linear(w, {key, DType::BF16, n, k, {}});
      const double t = best_seconds_per_call([&] { kern->forward(xb.data(), m, yb.data(), pool); }, macs);
      std::printf(" | %s %6.1f (x%.2f)", name.c_str(), macs / t / 1e9, t_blas / t);
    }
    std::printf("\n");
  }
  return 0;
}
