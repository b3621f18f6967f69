#include "engine/process_stats.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

namespace fp4lm::engine {

size_t peak_rss_bytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<size_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

size_t current_rss_bytes() {
  std::ifstream in("/proc/self/statm");
  size_t total = 0, resident = 0;
  if (!(in >> total >> resident)) return 0;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

void release_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

void map_large_allocations(size_t bytes) {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(bytes));
#else
  (void)bytes;
#endif
}

}  // namespace fp4lm::engine
