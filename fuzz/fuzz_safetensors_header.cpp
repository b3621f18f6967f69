// libFuzzer target: any byte string as a whole safetensors file. parse_header must either throw
// fp4lm::Error or return views that satisfy every promise of the format; anything else (another
// exception type, a sanitizer report, a broken invariant) is a finding.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fp4lm;
  std::map<std::string, std::string> metadata;
  std::vector<io::TensorEntry> entries;
  try {
    entries = io::SafetensorsFile::parse_header(data, size, "fuzz-input", &metadata);
  } catch (const Error&) {
    return 0;
  }
  const uint8_t* end = data + size;
  uint64_t prev_begin = 0, max_end = 0;
  unsigned sum = 0;
  for (const auto& e : entries) {
    const TensorView& v = e.view;
    // Inside the file, the size its shape says, in offset order, not overlapping.
    require(v.data >= data && v.data <= end && v.nbytes <= static_cast<size_t>(end - v.data));
    require(v.numel() >= 0);
    require(static_cast<uint64_t>(v.numel()) * dtype_size(v.dtype) == v.nbytes);
    require(e.offset >= prev_begin);
    if (v.nbytes) {
      require(e.offset >= max_end);
      max_end = e.offset + v.nbytes;
    }
    prev_begin = e.offset;
    // Touch every byte so AddressSanitizer would see a view reaching past the input.
    for (size_t i = 0; i < v.nbytes; ++i) sum += v.data[i];
  }
  asm volatile("" : : "r"(sum));  // keeps the reads from being optimised away
  return 0;
}
