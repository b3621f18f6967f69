#include "common/dense_reference.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace fp4lm::test {

std::vector<float> as_f32(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  to_f32_n(t.data, t.dtype, v.data(), v.size());
  return v;
}

std::string write_dense_checkpoint(const std::string& q, const std::filesystem::path& out,
                                   const std::vector<std::string>& drop, const Dequantize& dequantize) {
  auto ck = io::Checkpoint::open(q);
  io::SafetensorsWriter st;
  for (const std::string& name : ck->tensor_names()) {
    if (std::any_of(drop.begin(), drop.end(), [&](const std::string& d) { return name.ends_with(d); })) continue;
    const TensorView& t = ck->get(name);
    if (std::optional<DenseTensor> d = dequantize(*ck, name, t))
      st.add(name, DType::F32, d->shape, d->values);
    else if (t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16)
      st.add(name, DType::F32, t.shape, as_f32(t));
    else  // integer tables (DeepSeek-V4's hash routing tid2eid): as stored
      st.add(name, t.dtype, t.shape, t.data, t.nbytes);
  }
  std::filesystem::create_directories(out);
  st.write((out / "model.safetensors").string());
  nlohmann::json config = ck->config();
  config.erase("quantization_config");
  config["torch_dtype"] = "float32";
  std::ofstream(out / "config.json") << config.dump(2);
  return out.string();
}

double rel_to_range(const std::vector<float>& got, const std::vector<float>& want) {
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  double d = 0;
  for (size_t i = 0; i < got.size(); ++i) d = std::max(d, std::abs(static_cast<double>(got[i]) - want[i]));
  return d / (*hi - *lo);
}

}  // namespace fp4lm::test
