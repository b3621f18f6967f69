#pragma once
// The QuantMethod part the int4 loaders (gptq.cpp, awq.cpp, compressed_tensors_int4.cpp,
// modelopt_int4.cpp) share: the weight format and kernel key (int4 W4A16 whatever the producer),
// detection by one packed I32 tensor, and the module's group geometry checked against its packing.
// How each producer packs codes, zero points and scales stays in its own file.
#include <optional>
#include <string>

#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

class Int4QuantMethod : public QuantMethod {
 public:
  // `packed`: the suffix of the I32 tensor whose presence marks a module as this producer's.
  explicit Int4QuantMethod(const char* packed) : packed_(packed) {}
  kernels::WeightKey weight_key() const override { return kernels::WeightKey::int4; }
  std::optional<quant::Scheme> detect(const TensorLookup& tensors, const std::string& module) const override;
  kernels::QuantKey key(const quant::DiskFormat&, const std::vector<std::string>&, const TensorLookup&) const override {
    return kernels::kInt4W4A16;
  }

 protected:
  struct Geometry {
    int64_t k, group, groups;
  };
  // Module `m` of `rows` rows: k = spec.in_features, the config's group (0: per channel, = k).
  // Error naming the checkpoint, `producer` and the module unless rows is a multiple of
  // `row_multiple`, k of `k_multiple`, and the group divides k.
  static Geometry geometry(const ParamReader& p, const LayerSpec& spec, const std::string& m, int64_t rows,
                           const LayerScheme& scheme, const char* producer, int64_t row_multiple, int64_t k_multiple);

 private:
  const char* packed_;
};

}  // namespace fp4lm::model
