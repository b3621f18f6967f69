#include "kernels/a16_scope.h"

namespace fp4lm::kernels {

namespace {
thread_local A16Choice t_choice = A16Choice::by_call_size;
}

A16Scope::A16Scope(A16Choice c) : saved_(t_choice) { t_choice = c; }
A16Scope::~A16Scope() { t_choice = saved_; }
A16Choice A16Scope::current() { return t_choice; }

}  // namespace fp4lm::kernels
