#pragma once
// The clocks the benchmarks read. Per-core benchmarks on a shared machine count only the time their
// thread ran (kernel_core_bench, avx2_loop_bench); whole-run benchmarks report wall time beside the
// process's CPU time, the steadier figure on a loaded host (vision_tower_bench, diffusion_batch_bench).
#include <time.h>

#include <chrono>

// The calling thread's CPU time in seconds.
inline double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The whole process's CPU time in seconds (every thread).
inline double process_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Wall time in seconds from a steady clock.
inline double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
