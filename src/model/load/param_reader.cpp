#include "model/load/param_reader.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace fp4lm::model {

std::string ParamReader::where(const std::string& name) const {
  std::string file = ckpt_->find(name) ? ckpt_->file_of(name) : ckpt_->dir();
  return fmt::format("{}: tensor '{}'", file, name);
}

const TensorView& ParamReader::require(const std::string& name, std::initializer_list<DType> dtypes,
                                       const Shape& shape) const {
  const TensorView* t = ckpt_->find(name);
  if (!t) fail("{}: missing tensor '{}' (expected shape {})", ckpt_->dir(), name, shape_str(shape));
  check(name, *t, dtypes, shape);
  ckpt_->mark_used(name);
  return *t;
}

const TensorView* ParamReader::optional(const std::string& name, std::initializer_list<DType> dtypes,
                                        const Shape& shape) const {
  const TensorView* t = ckpt_->find(name);
  if (t) {
    check(name, *t, dtypes, shape);
    ckpt_->mark_used(name);
  }
  return t;
}

void ParamReader::check(const std::string& name, const TensorView& t, std::initializer_list<DType> dtypes,
                        const Shape& shape) const {
  bool ok = false;
  std::string names;
  for (DType d : dtypes) {
    ok |= t.dtype == d;
    names += (names.empty() ? "" : " or ") + std::string(dtype_name(d));
  }
  if (!ok) fail("{}: expected dtype {}, found {}", where(name), names, dtype_name(t.dtype));
  if (t.shape != shape) fail("{}: expected shape {}, found {}", where(name), shape_str(shape), shape_str(t.shape));
}

void ParamReader::acknowledge(const std::string& name) const { ckpt_->mark_used(name); }

std::optional<float> ParamReader::raw_scale(const std::string& name) const {
  const TensorView* t = ckpt_->find(name);
  if (!t) return std::nullopt;
  if (t->dtype != DType::F32) fail("{}: expected dtype F32, found {}", where(name), dtype_name(t->dtype));
  if (!(t->shape.empty() || t->shape == Shape{1}))
    fail("{}: expected a scalar (shape [] or [1]), found {}", where(name), shape_str(t->shape));
  ckpt_->mark_used(name);
  float v;
  std::memcpy(&v, t->data, sizeof v);
  return v;
}

std::optional<float> ParamReader::scale(const std::string& name, bool required, bool allow_zero) const {
  if (!ckpt_->find(name)) {
    if (required) fail("{}: missing tensor '{}' (an F32 scalar scale)", ckpt_->dir(), name);
    return std::nullopt;
  }
  const float v = *raw_scale(name);
  if (!std::isfinite(v) || v < 0) fail("{}: scale must be finite and positive, found {}", where(name), v);
  if (v == 0 && !allow_zero) fail("{}: scale is zero", where(name));
  return v;
}

}  // namespace fp4lm::model
