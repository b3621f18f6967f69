#pragma once
// Memory figures of this process, for the load/generation reports and the benchmarks.
#include <cstddef>

namespace fp4lm::engine {

size_t peak_rss_bytes();     // getrusage ru_maxrss
size_t current_rss_bytes();  // /proc/self/statm resident pages (0 when unavailable)

// Hands freed heap memory back to the OS. glibc keeps what a thread frees in that thread's arena
// for reuse (only the arena's free top beyond M_TRIM_THRESHOLD, 128 KiB, is returned by itself),
// so without this RSS stays at the high-water mark of the largest request; malloc_trim(0) also
// releases the whole free pages inside every arena. Called after large requests; a no-op where
// the C library has no malloc_trim.
void release_free_memory();

}  // namespace fp4lm::engine
