#pragma once
// Who decides whether a W4A4 layer runs a call through its W4A16 kernel (KernelOptions::
// a16_max_tokens). By default the kernel does, by the call's size (m <= a16_max_tokens). The
// batched forward (model/causal_lm) decides per sequence chunk instead — so that a sequence's
// result does not depend on what else is in the batch — and runs each group of rows under an
// A16Scope that forces the choice for every kernel call made on this thread while it lives.
namespace fp4lm::kernels {

enum class A16Choice { by_call_size, a16, a4 };

class A16Scope {
 public:
  explicit A16Scope(A16Choice c);
  ~A16Scope();
  A16Scope(const A16Scope&) = delete;
  A16Scope& operator=(const A16Scope&) = delete;

  // The innermost live scope's choice on this thread (by_call_size when none).
  static A16Choice current();

 private:
  A16Choice saved_;
};

}  // namespace fp4lm::kernels
