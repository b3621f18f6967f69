#include "kernels/cpu/backend_factory.h"

#include <fmt/format.h>

#include "kernels/cpu/isa_support.h"
#include "kernels/isa.h"
#include "kernels/cpu/fp8_kernels.h"
#include "kernels/cpu/moe_grouped.h"

namespace fp4lm::kernels::cpu {

namespace {

using MakeRowSplit = std::function<std::unique_ptr<RowSplitLinear>(LinearWeights, const LinearProblem&)>;

std::string check_positive_linear(const LinearProblem& p) {
  if (p.n <= 0 || p.k <= 0) return fmt::format("shape [{}, {}]: needs n > 0 and k > 0", p.n, p.k);
  return "";
}

std::string check_positive_moe(const MoeProblem& p) {
  if (p.hidden <= 0 || p.inter <= 0 || p.num_experts <= 0)
    return fmt::format("hidden {} / intermediate {} / {} experts: all need to be positive", p.hidden, p.inter,
                       p.num_experts);
  return "";
}

// The record every CPU backend shares: a Linear layer is one RowSplitLinear from `make`, a MoE
// layer the GroupedMoe of such experts.
Backend row_split_backend(std::string name, LayerKind kind, QuantKey scheme, bool weight_key_only,
                          IsaNeeds needs, MakeRowSplit make,
                          std::function<std::string(const LinearProblem&)> check_linear,
                          std::function<std::string(const MoeProblem&)> check_moe) {
  Backend b;
  b.name = std::move(name);
  b.kind = kind;
  b.schemes = {scheme};
  b.weight_key_only = weight_key_only;
  b.act_dtypes = {DType::F32, DType::BF16, DType::F16};
  b.isa = needs;
  b.unavailable_reason = [needs] { return isa_unavailable_reason(needs); };
  if (kind == LayerKind::linear) {
    b.check_linear = std::move(check_linear);
    b.make_linear = [make](LinearWeights w, const LinearProblem& p) -> std::unique_ptr<LinearKernel> {
      return make(std::move(w), p);
    };
  } else {
    b.check_moe = std::move(check_moe);
    b.make_moe = [make](MoeWeights w, const MoeProblem& p) -> std::unique_ptr<MoeKernel> {
      return std::make_unique<GroupedMoe>(std::move(w), p, make);
    };
  }
  return b;
}

}  // namespace

Backend nvfp4_cpu_backend(std::string name, LayerKind kind, Nvfp4Mode mode, const Nvfp4Kernels& isa,
                          IsaNeeds needs) {
  const bool w4a16 = mode == Nvfp4Mode::w4a16;
  const Nvfp4Kernels* table = &isa;
  Backend b = row_split_backend(
      std::move(name), kind, w4a16 ? kNvfp4W4A16 : kNvfp4W4A4, w4a16, needs,
      [mode, table](LinearWeights w, const LinearProblem& p) -> std::unique_ptr<RowSplitLinear> {
        return std::make_unique<Nvfp4Linear>(std::move(w), p, mode, *table);
      },
      check_nvfp4_linear, check_nvfp4_moe);
  if (w4a16) b.schemes.push_back(kMxfp4W4A16);  // MXFP4 as the same numbers in NVFP4 form
  return b;
}

Backend dense_cpu_backend(std::string name, LayerKind kind, const DenseKernels& isa,
                          IsaNeeds needs) {
  const DenseKernels* table = &isa;
  return row_split_backend(
      std::move(name), kind, kUnquantized, false, needs,
      [table](LinearWeights w, const LinearProblem& p) -> std::unique_ptr<RowSplitLinear> {
        return std::make_unique<DenseLinear>(std::move(w), p, *table, prepare_dense_matrix, "dense CPU kernel");
      },
      check_positive_linear, check_positive_moe);
}

Backend fp8_cpu_backend(std::string name, LayerKind kind, const Fp8Kernels& isa, const Fp8Kernels& block_isa,
                        IsaNeeds needs) {
  const Fp8Kernels* table = &isa;
  const Fp8Kernels* block_table = &block_isa;
  Backend b = row_split_backend(
      std::move(name), kind, kFp8W8A16, true, needs,
      [table, block_table](LinearWeights w, const LinearProblem& p) -> std::unique_ptr<RowSplitLinear> {
        if (w.key.weight == WeightKey::fp8_block)
          return std::make_unique<Fp8Linear>(std::move(w), p, *block_table, prepare_fp8_block_matrix,
                                             "block-FP8 CPU kernel");
        return std::make_unique<Fp8Linear>(std::move(w), p, *table, prepare_fp8_matrix, "FP8 CPU kernel");
      },
      check_positive_linear, check_positive_moe);
  b.schemes.push_back(kFp8BlockW8A16);
  return b;
}

Backend int4_cpu_backend(std::string name, LayerKind kind, const Int4Kernels& isa, IsaNeeds needs) {
  const Int4Kernels* table = &isa;
  return row_split_backend(
      std::move(name), kind, kInt4W4A16, true, needs,
      [table](LinearWeights w, const LinearProblem& p) -> std::unique_ptr<RowSplitLinear> {
        return std::make_unique<Int4Linear>(std::move(w), p, *table);
      },
      check_positive_linear, check_positive_moe);
}

Backend int8_cpu_backend(std::string name, LayerKind kind, const Int8Kernels& isa, IsaNeeds needs) {
  const Int8Kernels* table = &isa;
  return row_split_backend(
      std::move(name), kind, kInt8W8A16, true, needs,
      [table](LinearWeights w, const LinearProblem& p) -> std::unique_ptr<RowSplitLinear> {
        return std::make_unique<Int8Linear>(std::move(w), p, *table, prepare_int8_matrix, "int8 CPU kernel");
      },
      check_positive_linear, check_positive_moe);
}

}  // namespace fp4lm::kernels::cpu
