#include "model/quant_method/int4_method.h"

#include <fmt/format.h>

#include "core/error.h"

namespace fp4lm::model {

std::optional<quant::Scheme> Int4QuantMethod::detect(const TensorLookup& tensors, const std::string& module) const {
  if (tensors(module + "." + packed_) == DType::I32) return quant::Scheme::int4;
  return std::nullopt;
}

Int4QuantMethod::Geometry Int4QuantMethod::geometry(const ParamReader& p, const LayerSpec& spec, const std::string& m,
                                                    int64_t rows, const LayerScheme& scheme, const char* producer,
                                                    int64_t row_multiple, int64_t k_multiple) {
  const int64_t k = spec.in_features, group = scheme.on_disk.int4.group ? scheme.on_disk.int4.group : k;
  if (rows % row_multiple != 0 || k % k_multiple != 0 || group <= 0 || k % group != 0)
    fail("{}: {} module {} is [{}, {}]: int4 packing needs rows a multiple of {}, k a multiple of {} and "
         "group_size {} to divide {}",
         p.checkpoint().dir(), producer, m, rows, k, row_multiple, k_multiple, group, k);
  return {k, group, k / group};
}

}  // namespace fp4lm::model
