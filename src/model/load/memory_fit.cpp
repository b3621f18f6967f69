#include "model/load/memory_fit.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace fp4lm::model {

namespace {

// The decoder layer index of `name` (after `prefix` + "layers."), or -1 when it is not a layer's.
int64_t layer_of(const std::string& name, const std::string& prefix) {
  const std::string head = prefix + "layers.";
  if (name.rfind(head, 0) != 0) return -1;
  size_t i = head.size();
  int64_t v = 0;
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) v = v * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? v : -1;
}

double gib(size_t b) { return static_cast<double>(b) / (1ull << 30); }

}  // namespace

size_t stage_weight_bytes(const io::Checkpoint& ckpt, const std::string& prefix, int64_t first_layer,
                          int64_t end_layer, bool ends) {
  size_t total = 0;
  for (const std::string& name : ckpt.tensor_names()) {
    const int64_t layer = layer_of(name, prefix);
    const bool take = layer >= 0 ? layer >= first_layer && layer < end_layer
                                 : ends && (name.rfind(prefix, 0) == 0 || name.find("lm_head.") != std::string::npos);
    if (take) total += ckpt.get(name).nbytes;
  }
  return total;
}

size_t physical_ram_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  size_t kib = 0;
  while (f >> key >> kib >> unit)
    if (key == "MemTotal:") return kib * 1024;
  return 0;
}

void check_weights_fit(const std::string& dir, size_t weights, size_t ram) {
  if (ram == 0 || weights <= ram) return;
  const char* allow = std::getenv("FP4LM_ALLOW_PAGING");
  if (allow && std::string(allow) == "1") {
    log().warn("{}: the weights ({:.1f} GiB) exceed this machine's RAM ({:.1f} GiB); FP4LM_ALLOW_PAGING=1: running "
               "from the page cache, every token reads the excess from disk",
               dir, gib(weights), gib(ram));
    return;
  }
  fail("{}: the model needs {:.1f} GiB of RAM for its weights alone, this machine has {:.1f} GiB: it would read "
       "weights from disk at every token. Split it over machines (mpirun -np N fp4lm ... --pipeline-parallel-size N; "
       "README 'More than one machine'), or set FP4LM_ALLOW_PAGING=1 to run from disk anyway",
       dir, gib(weights), gib(ram));
}

}  // namespace fp4lm::model
