#include "kernels/cpu/amx_tile_permission.h"

#include <fmt/format.h>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#endif

namespace fp4lm::kernels::cpu {

namespace {

std::string request() {
#if defined(__linux__) && defined(__x86_64__)
  // asm/prctl.h and the kernel's xstate numbering (fixed ABI since Linux 5.16).
  constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    const int e = errno;
    return fmt::format("Linux refused the AMX tile state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): {}{})",
                       std::strerror(e), e == EINVAL ? "; Linux before 5.16, or tiles disabled" : "");
  }
  unsigned long granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 || !(granted & (1ul << kXfeatureXtiledata)))
    return "Linux did not grant the AMX tile state (arch_prctl(ARCH_GET_XCOMP_PERM) lacks XFEATURE_XTILEDATA)";
  return "";
#else
  return "AMX tiles are only requested on Linux x86-64";
#endif
}

}  // namespace

std::string amx_tile_permission_reason() {
  static const std::string why = request();
  return why;
}

}  // namespace fp4lm::kernels::cpu
