#pragma once
// The calling thread's CPU time in seconds: per-core benchmarks on a shared machine count only the
// time their thread ran (kernel_core_bench, avx2_loop_bench).
#include <time.h>

inline double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}
