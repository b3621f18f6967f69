// The Qwen3.5 / Qwen3.6 vision tower (model/vision/qwen3_5_vision_tower.h) at the real
// Qwen3.6-35B-A3B shapes (transformers' Qwen3_5MoeVisionConfig defaults: depth 27, hidden 1152,
// 16 heads, intermediate 4304, patch 16, spatial_merge 2, temporal_patch 2; out_hidden 2048, the
// 35B-A3B's hidden size) with synthetic bf16 weights and bf16 activations (the engine's dtype for a
// bf16 checkpoint), against the same run's dense bf16 GEMM throughput at large M (one Linear of the
// tower's fc1 shape, 4304 x 1152, M = 4096, on the backend the oracle picks for it).
//
//   vision_tower_bench [--threads 2] [--depth 27] [--sizes 448x448,1024x768] [--repeat 1]
//                      [--dense-backend NAME]
// prints per image: patches, seconds (the best of --repeat encodes) and that encode's process
// CPU seconds (all threads; on a shared machine the wall time counts waiting, CPU time does
// not), GFLOP (Linears + attention), GFLOP/s and its ratio to the GEMM baseline. --dense-backend
// forces the Linears' backend (e.g. cpu_dense_avx2: a same-binary baseline for the oracle's
// choice). docs/BENCHMARKS.md, "Vision tower".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#include "bench_clock.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "model/vision/qwen3_5_vision_tower.h"

using namespace fp4lm;
using model::Qwen3_5VisionConfig;
using model::Qwen3_5VisionTower;

namespace {

std::string dense_backend;  // --dense-backend ("" = the oracle's choice)

std::mt19937 rng(43);

std::shared_ptr<std::vector<uint16_t>> bf16_random(size_t n, float scale) {
  auto v = std::make_shared<std::vector<uint16_t>>(n);
  std::normal_distribution<float> d(0.0f, scale);
  for (auto& x : *v) x = f32_to_bf16(d(rng));
  return v;
}

std::unique_ptr<model::Linear> linear(const std::string& name, int64_t n, int64_t k) {
  auto w = bf16_random(static_cast<size_t>(n * k), 1.0f / std::sqrt(static_cast<float>(k)));
  return model::dense_linear(name, w->data(), DType::BF16, n, k, std::vector<float>(static_cast<size_t>(n), 0.01f),
                             DType::BF16, w, dense_backend);
}

std::vector<float> filled(int64_t n, float v) { return std::vector<float>(static_cast<size_t>(n), v); }

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  int64_t depth = 27;
  std::string sizes = "448x448,1024x768";
  int repeat = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else if (a == "--depth") depth = std::stoll(argv[i + 1]);
    else if (a == "--sizes") sizes = argv[i + 1];
    else if (a == "--repeat") repeat = std::max(1, std::stoi(argv[i + 1]));
    else if (a == "--dense-backend") dense_backend = argv[i + 1];
    else {
      std::fprintf(stderr,
                   "usage: vision_tower_bench [--threads N] [--depth N] [--sizes HxW,...] [--repeat N] "
                   "[--dense-backend NAME]\n");
      return 2;
    }
  }
  ThreadPool::set_global_threads(threads);
  ThreadPool& pool = ThreadPool::global();

  Qwen3_5VisionConfig c;
  c.depth = depth;
  c.out_hidden_size = 2048;
  const int64_t H = c.hidden_size, I = c.intermediate_size, M = H * 4;

  // Baseline: the dense bf16 GEMM at large M.
  double gemm_gflops = 0;
  {
    const int64_t m = 4096;
    auto fc1 = linear("baseline", I, H);
    std::vector<float> x(static_cast<size_t>(m * H), 0.5f), y(static_cast<size_t>(m * I));
    fc1->forward(x.data(), m, y.data(), pool);
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      const double t0 = wall_seconds();
      fc1->forward(x.data(), m, y.data(), pool);
      best = std::min(best, wall_seconds() - t0);
    }
    gemm_gflops = 2.0 * m * I * H / best / 1e9;
    std::printf("dense bf16 GEMM %lldx%lldx%lld (backend %s): %.3f s, %.1f GFLOP/s\n", static_cast<long long>(m),
                static_cast<long long>(I), static_cast<long long>(H), fc1->backend().c_str(), best, gemm_gflops);
  }

  Qwen3_5VisionTower::Weights w;
  {
    auto pe = bf16_random(static_cast<size_t>(H * c.patch_width()), 0.02f);
    w.patch_embed = model::dense_linear("patch_embed", pe->data(), DType::BF16, H, c.patch_width(), filled(H, 0.0f),
                                        DType::BF16, pe, dense_backend);
  }
  w.pos_embed.resize(static_cast<size_t>(c.num_position_embeddings * H));
  std::normal_distribution<float> nd(0.0f, 0.02f);
  for (float& v : w.pos_embed) v = nd(rng);
  for (int64_t i = 0; i < depth; ++i) {
    Qwen3_5VisionTower::Block b;
    b.norm1_w = b.norm2_w = filled(H, 1.0f);
    b.norm1_b = b.norm2_b = filled(H, 0.0f);
    b.qkv = linear("qkv", 3 * H, H);
    b.proj = linear("proj", H, H);
    b.fc1 = linear("fc1", I, H);
    b.fc2 = linear("fc2", H, I);
    w.blocks.push_back(std::move(b));
  }
  w.merger_norm_w = filled(H, 1.0f);
  w.merger_norm_b = filled(H, 0.0f);
  w.merger_fc1 = linear("merger.fc1", M, M);
  w.merger_fc2 = linear("merger.fc2", c.out_hidden_size, M);
  const std::string linears_on = w.merger_fc2->backend();
  const Qwen3_5VisionTower tower(c, std::move(w), "synthetic");
  std::printf("tower: depth %lld, hidden %lld, %lld heads, intermediate %lld, patch %lld, out %lld; %d threads; "
              "Linears on %s\n",
              static_cast<long long>(depth), static_cast<long long>(H), static_cast<long long>(c.num_heads),
              static_cast<long long>(I), static_cast<long long>(c.patch_size),
              static_cast<long long>(c.out_hidden_size), threads, linears_on.c_str());

  size_t pos = 0;
  bool first = true;
  while (pos < sizes.size()) {
    const size_t comma = sizes.find(',', pos);
    const std::string s = sizes.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? sizes.size() : comma + 1;
    const size_t xpos = s.find('x');
    const int64_t h = std::stoll(s.substr(0, xpos)), wd = std::stoll(s.substr(xpos + 1));
    vision::QwenVlPixels px;
    px.grid = {1, h / c.patch_size, wd / c.patch_size};
    px.rows = px.grid.h * px.grid.w;
    px.cols = c.patch_width();
    px.pixel_values.resize(static_cast<size_t>(px.rows * px.cols));
    std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
    for (float& v : px.pixel_values) v = ud(rng);
    if (first) tower.encode(px);  // warm-up: page in the weights, size the buffers
    first = false;
    double t = 1e30, cpu = 0;
    int64_t tokens = 0;
    for (int r = 0; r < repeat; ++r) {
      const double t0 = wall_seconds(), c0 = process_cpu_seconds();
      const model::ImageEmbeddings e = tower.encode(px);
      const double dt = wall_seconds() - t0, dc = process_cpu_seconds() - c0;
      tokens = e.rows;
      if (dt < t) t = dt, cpu = dc;
    }
    const double gf = tower.flops(px.rows) / 1e9;
    std::printf("image %lldx%lld: %lld patches -> %lld tokens: %.3f s (best of %d; %.3f s CPU, all threads), %.1f "
                "GFLOP, %.1f GFLOP/s = %.2f of the GEMM\n",
                static_cast<long long>(h), static_cast<long long>(wd), static_cast<long long>(px.rows),
                static_cast<long long>(tokens), t, repeat, cpu, gf, gf / t, gf / t / gemm_gflops);
  }
  return 0;
}
