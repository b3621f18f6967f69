#include "common/compressed_tensors_writer.h"

#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "common/checkpoint_edit.h"
#include "core/error.h"

namespace fp4lm::test {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

float f32_of(const EditedTensor& t) {
  float v;
  std::memcpy(&v, t.bytes.data(), sizeof v);
  return v;
}

void set_f32(EditedTensor& t, float v) {
  t.bytes.resize(sizeof v);
  std::memcpy(t.bytes.data(), &v, sizeof v);
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

void write_json(const fs::path& p, const json& j) {
  std::ofstream out(p);
  out << j.dump(2) << "\n";
}

}  // namespace

int write_compressed_tensors(const fs::path& modelopt_dir, const fs::path& ct_dir, const CtWriteOptions& o) {
  // The NVFP4 modules: those with a weight_scale_2.
  std::set<std::string> nvfp4;
  std::map<std::string, float> canonical;  // ModelOpt scale -> 1.0f/(1.0f/x) where that differs
  edit_tensors(modelopt_dir, [&](EditedTensor& t) {
    if (ends_with(t.name, ".weight_scale_2")) nvfp4.insert(t.name.substr(0, t.name.size() - 15));
    if (ends_with(t.name, ".weight_scale_2") || ends_with(t.name, ".input_scale")) {
      const float x = f32_of(t), back = 1.0f / (1.0f / x);
      if (back != x) canonical[t.name] = back, set_f32(t, back);
    }
    return true;
  });
  fs::remove_all(ct_dir);
  copy_dir(modelopt_dir, ct_dir);
  edit_tensors(ct_dir, [&](EditedTensor& t) {
    const size_t dot = t.name.rfind('.');
    const std::string module = t.name.substr(0, dot), leaf = t.name.substr(dot + 1);
    const bool is_nvfp4 = nvfp4.count(module) > 0;
    if (leaf == "input_scale" && o.drop_input_scales) return false;
    if (is_nvfp4 && leaf == "weight") t.name = module + ".weight_packed";
    if (is_nvfp4 && leaf == "weight_scale_2") t.name = module + ".weight_global_scale", set_f32(t, 1.0f / f32_of(t));
    if (is_nvfp4 && leaf == "input_scale") t.name = module + ".input_global_scale", set_f32(t, 1.0f / f32_of(t));
    if (t.dtype == DType::F32 && t.shape.empty()) t.shape = {1};
    return true;
  });
  if (o.drop_input_scales)
    edit_tensors(modelopt_dir, [&](EditedTensor& t) { return !ends_with(t.name, ".input_scale"); });
  fs::remove(ct_dir / "hf_quant_config.json");
  json config = read_json(ct_dir / "config.json");
  config["quantization_config"] = o.quantization_config;
  write_json(ct_dir / "config.json", config);
  return static_cast<int>(canonical.size());
}

json ct_nvfp4_group(const json& targets, bool w4a4) {
  json args = {{"num_bits", 4}, {"type", "float"}, {"strategy", "tensor_group"}, {"group_size", 16},
               {"symmetric", true}, {"dynamic", false}, {"observer", "minmax"}};
  json g = {{"targets", targets}, {"weights", args}, {"input_activations", nullptr}, {"output_activations", nullptr},
            {"format", "nvfp4-pack-quantized"}};
  if (w4a4) {
    json a = args;
    a["dynamic"] = "local";
    g["input_activations"] = a;
  }
  return g;
}

json ct_fp8_group(const json& targets, const char* weight_strategy, const char* act) {
  json w = {{"num_bits", 8}, {"type", "float"}, {"strategy", weight_strategy}, {"symmetric", true},
            {"dynamic", false}, {"group_size", nullptr}};
  json g = {{"targets", targets}, {"weights", w}, {"input_activations", nullptr}, {"output_activations", nullptr},
            {"format", "float-quantized"}};
  const std::string a = act;
  if (a == "static") g["input_activations"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"},
                                               {"symmetric", true}, {"dynamic", false}};
  if (a == "dynamic") g["input_activations"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"},
                                                {"symmetric", true}, {"dynamic", true}};
  return g;
}

json ct_config(const std::string& format, const json& groups, const json& ignore) {
  return {{"quant_method", "compressed-tensors"},
          {"format", format},
          {"quantization_status", "compressed"},
          {"config_groups", groups},
          {"ignore", ignore},
          {"kv_cache_scheme", nullptr},
          {"global_compression_ratio", nullptr},
          {"sparsity_config", json::object()},
          {"version", "0.12.2"}};
}

}  // namespace fp4lm::test
