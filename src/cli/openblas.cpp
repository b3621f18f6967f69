#include "cli/openblas.h"

#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace fp4lm::cli {

namespace {

OpenBlas load() {
  void* lib = nullptr;
  std::string tried;
  for (const char* name : {"libopenblas.so.0", "libopenblas.so"}) {
    if ((lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    const char* why = ::dlerror();
    tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", name, why ? why : "not found");
  }
  if (!lib)
    fail("bench kernels: OpenBLAS, the sgemm baseline, cannot be loaded ({}); install it (Debian: apt-get install "
         "libopenblas0)",
         tried);
  auto sym = [&](const char* name, bool required) {
    void* p = ::dlsym(lib, name);
    if (!p && required) fail("bench kernels: the loaded OpenBLAS has no {}", name);
    return p;
  };
  OpenBlas b;
  b.sgemm = reinterpret_cast<decltype(b.sgemm)>(sym("cblas_sgemm", true));
  b.set_num_threads = reinterpret_cast<decltype(b.set_num_threads)>(sym("openblas_set_num_threads", true));
  b.get_corename = reinterpret_cast<decltype(b.get_corename)>(sym("openblas_get_corename", true));
  b.sbgemm = reinterpret_cast<decltype(b.sbgemm)>(sym("cblas_sbgemm", false));
  return b;  // the library stays loaded for the process
}

}  // namespace

const OpenBlas& openblas() {
  static const OpenBlas b = load();
  return b;
}

}  // namespace fp4lm::cli
