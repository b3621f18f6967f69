#pragma once
// Checked access to a checkpoint's parameters: every defect is an Error naming the file, the
// tensor, what was expected and what was found. The quant methods and the loader read through it,
// and every tensor it returns counts as consumed (io::Checkpoint::mark_used).
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "io/checkpoint.h"

namespace fp4lm::model {

class ParamReader {
 public:
  explicit ParamReader(std::shared_ptr<const io::Checkpoint> ckpt) : ckpt_(std::move(ckpt)) {}

  const io::Checkpoint& checkpoint() const { return *ckpt_; }
  // Keeps the mapped tensors alive (LinearWeights::keepalive).
  const std::shared_ptr<const io::Checkpoint>& keepalive() const { return ckpt_; }
  // "<file>: tensor '<name>'" (the checkpoint directory when the tensor is absent).
  std::string where(const std::string& name) const;
  // The tensor, which must exist with one of `dtypes` and exactly `shape`.
  const TensorView& require(const std::string& name, std::initializer_list<DType> dtypes, const Shape& shape) const;
  // An optional tensor: nullptr when absent, else checked like require().
  const TensorView* optional(const std::string& name, std::initializer_list<DType> dtypes, const Shape& shape) const;
  void check(const std::string& name, const TensorView& t, std::initializer_list<DType> dtypes,
             const Shape& shape) const;
  // A global scale: F32 scalar, 0-d or [1], finite and >= 0 (> 0 unless allow_zero). nullopt
  // when absent and not required.
  std::optional<float> scale(const std::string& name, bool required, bool allow_zero = false) const;
  // A scalar scale as stored (F32, 0-d or [1]), whatever its value (NaN, inf, zero); nullopt
  // when absent. For readers that give such values a meaning.
  std::optional<float> raw_scale(const std::string& name) const;
  // A tensor the layer's scheme reads no value from by design and says so where it decides it
  // (e.g. NVFP4's input_scale under the W4A16 override): counted as consumed by the load rule
  // (model/load/tensor_usage.h). The methods above record what they return themselves.
  void acknowledge(const std::string& name) const;

 private:
  std::shared_ptr<const io::Checkpoint> ckpt_;
};

}  // namespace fp4lm::model
