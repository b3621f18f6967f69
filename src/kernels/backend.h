#pragma once
// What a compute backend declares and provides. Backends are listed, in priority order, in the
// one table in kernels/registry.cpp; the oracle (select_linear / select_moe) picks the first
// that is available and accepts the layer. Nothing else in the engine looks at backend names.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/expert_activation.h"
#include "kernels/isa.h"
#include "kernels/quant_key.h"
#include "kernels/weights.h"

namespace fp4lm::kernels {

enum class LayerKind { linear, moe };

struct KernelOptions {
  // For W4A4 layers: calls with m <= a16_max_tokens run the W4A16 kernel on the same weights
  // (decode at 16-bit activations, prefill at 4-bit). 0 = off. A kernels::A16Scope on the
  // calling thread overrides the size rule (the batched forward decides per sequence chunk).
  int64_t a16_max_tokens = 0;
};

struct LinearProblem {
  QuantKey key;
  DType act_dtype = DType::F32;  // F32, BF16 or F16: the dtype of x and y
  int64_t n = 0, k = 0;
  KernelOptions options;
};

struct MoeProblem {
  QuantKey key;
  DType act_dtype = DType::F32;
  int64_t num_experts = 0, top_k = 0, hidden = 0, inter = 0;
  KernelOptions options;
  // Between w13 and w2 (kernels/expert_activation.h); every MoE backend applies it.
  ExpertActivation activation = {};
};

// A layer's weights prepared for one backend.
class LinearKernel {
 public:
  virtual ~LinearKernel() = default;
  // y[m, n] = x[m, k] · Wᵀ (+ bias). x and y are row-major in the problem's act_dtype; fp32
  // accumulation. Results do not depend on the pool's size.
  virtual void forward(const void* x, int64_t m, void* y, ThreadPool& pool) const = 0;
  // Bytes of weight memory this kernel keeps resident (owned or mapped).
  virtual size_t weight_bytes() const = 0;
};

class MoeKernel {
 public:
  virtual ~MoeKernel() = default;
  // y[i] = Σ_j topk_weights[i*top_k + j] · expert_{topk_ids[i*top_k + j]}(x[i]) for i < m;
  // expert(x) = w2(act(x·w13ᵀ + b13)) + b2, act the problem's ExpertActivation (default
  // silu(gate) · up), biases when the weights carry them. x [m, hidden], y [m, hidden] in act_dtype.
  virtual void forward(const void* x, int64_t m, const int32_t* topk_ids, const float* topk_weights,
                       int64_t top_k, void* y, ThreadPool& pool) const = 0;
  virtual size_t weight_bytes() const = 0;
};

struct Backend {
  std::string name;          // e.g. "cpu_w4a16_avx2"
  LayerKind kind = LayerKind::linear;
  std::string device = "cpu";
  std::vector<QuantKey> schemes;  // the (weight, activation) pairs it runs
  // W4A16 backends match on the weight key alone (docs/ARCHITECTURE.md, "Loading a model"): a layer
  // whose activation key is none (W4A16 on disk, or NVFP4 under --override-activation-dtype) finds
  // them that way.
  bool weight_key_only = false;
  std::vector<DType> act_dtypes;
  // The instruction set its kernels were built for and the CPU features they use (kernels/isa.h).
  IsaNeeds isa;
  // "" when the backend can run on this machine, else why not (isa_unavailable_reason(isa) for
  // the CPU backends: "CPU lacks avx2", "disabled by FP4LM_DISABLE_ISA=avx2", ...).
  std::function<std::string()> unavailable_reason;
  // Shape limits and the like: "" to accept, else the reason. May be empty (accept all).
  std::function<std::string(const LinearProblem&)> check_linear;
  std::function<std::string(const MoeProblem&)> check_moe;
  std::function<std::unique_ptr<LinearKernel>(LinearWeights, const LinearProblem&)> make_linear;
  std::function<std::unique_ptr<MoeKernel>(MoeWeights, const MoeProblem&)> make_moe;

  bool supports(QuantKey key) const;
};

}  // namespace fp4lm::kernels
