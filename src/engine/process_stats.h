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

// Gives every allocation of at least `bytes` its own mapping, unmapped when freed. glibc starts
// at 128 KiB but raises this threshold each time such a block is freed (up to 32 MiB), after
// which a request's large buffers (bodies, prompts, parsed JSON) come from the heaps and stay
// there; a fixed threshold keeps a server's RSS from ratcheting up after large requests.
void map_large_allocations(size_t bytes);

}  // namespace fp4lm::engine
