#pragma once
// Memory figures of this process, for the load/generation reports and the benchmarks.
#include <cstddef>

namespace fp4lm::engine {

size_t peak_rss_bytes();     // getrusage ru_maxrss
size_t current_rss_bytes();  // /proc/self/statm resident pages (0 when unavailable)

}  // namespace fp4lm::engine
