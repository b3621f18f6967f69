#include "quant/export_format.h"

#include <cctype>
#include <set>
#include <unordered_set>

#include <fmt/format.h>

#include "core/error.h"

namespace fp4lm::quant {

using nlohmann::json;

namespace {

void check_export_algo(QuantAlgo algo) {
  if (algo != QuantAlgo::NVFP4 && algo != QuantAlgo::W4A16_NVFP4)
    fail("fp4lm exports NVFP4 or W4A16_NVFP4, not {}", algo_name(algo));
}

json producer_json(const std::string& version) { return {{"name", "fp4lm"}, {"version", version}}; }

json fp4_tensor_args() {
  return {{"dynamic", false}, {"num_bits", 4}, {"type", "float"}, {"group_size", 16}};
}

}  // namespace

namespace {

// The name written: ModelOpt calls NVFP4 with AWQ's scales NVFP4_AWQ.
std::string written_algo(QuantAlgo algo, bool pre_quant_scale) {
  return algo == QuantAlgo::NVFP4 && pre_quant_scale ? "NVFP4_AWQ" : std::string(algo_name(algo));
}

}  // namespace

json hf_quant_config_json(QuantAlgo algo, const std::vector<std::string>& exclude_modules,
                          const std::string& producer_version, bool pre_quant_scale) {
  check_export_algo(algo);
  json q = {{"quant_algo", written_algo(algo, pre_quant_scale)},
            {"kv_cache_quant_algo", nullptr},
            {"group_size", 16}};
  if (pre_quant_scale) {
    if (algo == QuantAlgo::NVFP4) q["has_zero_point"] = false;
    q["pre_quant_scale"] = true;
  }
  q["exclude_modules"] = exclude_modules;
  return {{"producer", producer_json(producer_version)}, {"quantization", q}};
}

json quantization_config_json(QuantAlgo algo, const std::vector<std::string>& exclude_modules,
                              const std::string& producer_version, bool pre_quant_scale) {
  check_export_algo(algo);
  json group = {{"weights", fp4_tensor_args()}, {"targets", {"Linear"}}};
  if (algo == QuantAlgo::NVFP4) group["input_activations"] = fp4_tensor_args();
  json c = {{"quant_method", "modelopt"},
            {"quant_algo", written_algo(algo, pre_quant_scale)},
            {"config_groups", {{"group_0", group}}},
            {"ignore", exclude_modules},
            {"producer", producer_json(producer_version)}};
  if (pre_quant_scale) c["pre_quant_scale"] = true;
  return c;
}


std::vector<std::string> summarize_exclusions(const std::vector<std::string>& unquantized,
                                              const std::vector<std::string>& quantized) {
  const std::set<std::string> q(quantized.begin(), quantized.end());
  auto some_quantized_starts_with = [&](const std::string& p) {
    auto it = q.lower_bound(p);
    return it != q.end() && it->compare(0, p.size(), p) == 0;
  };
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  for (const std::string& u : unquantized) {
    std::string entry = u;
    for (size_t i = 0; u.find('*') == std::string::npos && i < u.size(); ++i) {
      if (u[i] != '.') continue;
      const std::string p = u.substr(0, i);
      if (!some_quantized_starts_with(p)) {
        entry = p + "*";
        break;
      }
      if (!q.contains(p) && !some_quantized_starts_with(p + ".")) {
        entry = p + ".*";
        break;
      }
    }
    if (seen.insert(entry).second) out.push_back(entry);
  }
  return out;
}

json compressed_tensors_config_json(QuantAlgo algo, const std::vector<std::string>& ignore) {
  check_export_algo(algo);
  // llm-compressor's ignore names Linear modules only: not the embedding ModelOpt lists first.
  std::vector<std::string> linear_ignore;
  for (const std::string& m : ignore)
    if (!m.ends_with("embed_tokens")) linear_ignore.push_back(m);
  // As llm-compressor 0.14 / compressed-tensors 0.19 write the NVFP4 preset (docs/FORMAT.md §9).
  const json args = {{"num_bits", 4},
                     {"type", "float"},
                     {"symmetric", true},
                     {"group_size", 16},
                     {"strategy", "tensor_group"},
                     {"dynamic", false},
                     {"actorder", nullptr},
                     {"block_structure", nullptr},
                     {"observer", "memoryless_minmax"},
                     {"observer_kwargs", json::object()},
                     {"scale_dtype", "torch.float8_e4m3fn"},
                     {"zp_dtype", nullptr}};
  json group = {{"targets", {"Linear"}},
                {"weights", args},
                {"input_activations", nullptr},
                {"output_activations", nullptr},
                {"format", "nvfp4-pack-quantized"}};
  if (algo == QuantAlgo::NVFP4) {
    json act = args;
    act["dynamic"] = "local";
    act["observer"] = "static_minmax";
    group["input_activations"] = act;
  }
  return {{"quant_method", "compressed-tensors"},
          {"format", "nvfp4-pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", group}}},
          {"ignore", linear_ignore},
          {"kv_cache_scheme", nullptr},
          {"global_compression_ratio", nullptr},
          {"sparsity_config", json::object()},
          {"transform_config", json::object()}};
}

uint64_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  auto bad = [&]() {
    usage_fail("{}: '{}' is not a size (examples: 5GB, 500MB, 2GiB, 1000000)", flag, text);
  };
  if (i == 0 || i > 15) bad();
  const uint64_t number = std::stoull(text.substr(0, i));
  std::string unit;
  for (size_t j = i; j < text.size(); ++j) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(text[j])));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  uint64_t mult = 0;
  if (unit.empty()) mult = 1;
  else if (unit == "K") mult = 1000ull;
  else if (unit == "M") mult = 1000ull * 1000;
  else if (unit == "G") mult = 1000ull * 1000 * 1000;
  else if (unit == "T") mult = 1000ull * 1000 * 1000 * 1000;
  else if (unit == "KI") mult = 1ull << 10;
  else if (unit == "MI") mult = 1ull << 20;
  else if (unit == "GI") mult = 1ull << 30;
  else if (unit == "TI") mult = 1ull << 40;
  else bad();
  if (number == 0) usage_fail("{}: the size must be positive (got '{}')", flag, text);
  if (number > UINT64_MAX / mult) bad();
  return number * mult;
}

ShardLayout assign_shards(const std::vector<uint64_t>& tensor_bytes, uint64_t max_shard_bytes) {
  if (max_shard_bytes == 0) fail("shard size limit must be positive");
  ShardLayout l;
  size_t count = 0;
  uint64_t used = 0;
  for (uint64_t b : tensor_bytes) {
    // A new shard when this tensor would overflow a shard that already holds something.
    if (count == 0 || (used > 0 && used + b > max_shard_bytes)) {
      ++count;
      used = 0;
    }
    l.shard_of.push_back(count - 1);
    used += b;
  }
  if (count == 0) count = 1;
  if (count == 1) {
    l.files = {"model.safetensors"};
  } else {
    for (size_t i = 0; i < count; ++i) l.files.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, count));
  }
  return l;
}

json shard_index_json(const std::vector<std::string>& tensor_names, const ShardLayout& layout, uint64_t total_size) {
  if (tensor_names.size() != layout.shard_of.size()) fail("shard index: {} names for {} tensors", tensor_names.size(), layout.shard_of.size());
  json map = json::object();
  for (size_t i = 0; i < tensor_names.size(); ++i) map[tensor_names[i]] = layout.files[layout.shard_of[i]];
  return {{"metadata", {{"total_size", total_size}}}, {"weight_map", map}};
}

}  // namespace fp4lm::quant
