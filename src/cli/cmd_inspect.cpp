// `fp4lm inspect --model DIR [--json]`: what a checkpoint is (architecture, main dimensions, dtype,
// quantization summary) and what it holds (tensors and bytes per dtype). The facts are gathered
// into one JSON object (inspect_facts) that --json prints as is and the human form lays out.
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/json_file.h"

namespace fp4lm::cli {
namespace {

using nlohmann::json;

// A config value as written (any JSON type), or null when absent. The model layer owns the real
// config parsing; inspect reports what the file says.
json field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? json(nullptr) : *it;
}

json first_of(const json& obj, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (auto v = field(obj, k); !v.is_null()) return v;
  return nullptr;
}

// The quantization summary, read raw from hf_quant_config.json ("quantization" object) or else
// config.json "quantization_config"; null for an unquantized checkpoint.
json quantization_summary(const io::Checkpoint& ck) {
  if (const auto& hq = ck.hf_quant_config()) {
    json q = field(*hq, "quantization");
    if (!q.is_object())
      fail("{}/hf_quant_config.json: 'quantization' must be an object, found {}", ck.dir(),
           q.is_null() ? "nothing" : io::json_type_name(q));
    return {{"quant_algo", field(q, "quant_algo")},
            {"group_size", field(q, "group_size")},
            {"kv_cache_quant_algo", field(q, "kv_cache_quant_algo")},
            {"exclude_modules", field(q, "exclude_modules")},
            {"source", "hf_quant_config.json"}};
  }
  json qc = field(ck.config(), "quantization_config");
  if (qc.is_null()) return nullptr;
  if (!qc.is_object())
    fail("{}/config.json: 'quantization_config' must be an object, found {}", ck.dir(),
         io::json_type_name(qc));
  return {{"quant_algo", field(qc, "quant_algo")},
          {"group_size", field(qc, "group_size")},
          {"kv_cache_quant_algo", field(qc, "kv_cache_quant_algo")},
          {"exclude_modules", first_of(qc, {"exclude_modules", "ignore"})},
          {"source", "config.json"}};
}

json inspect_facts(const io::Checkpoint& ck) {
  const json& c = ck.config();
  json arch = field(c, "architectures");
  if (arch.is_array()) arch = arch.empty() ? json(nullptr) : arch[0];

  std::map<std::string, size_t> bytes, counts;
  size_t total = 0, n = 0;
  for (const auto& name : ck.tensor_names()) {
    const TensorView& v = ck.get(name);
    std::string dt(dtype_name(v.dtype));
    bytes[dt] += v.nbytes;
    counts[dt] += 1;
    total += v.nbytes;
    ++n;
  }
  return {
      {"model", ck.dir()},
      {"architecture", arch},
      {"num_layers", field(c, "num_hidden_layers")},
      {"hidden_size", field(c, "hidden_size")},
      {"intermediate_size", field(c, "intermediate_size")},
      {"moe_intermediate_size", field(c, "moe_intermediate_size")},
      {"num_experts", first_of(c, {"num_experts", "num_local_experts"})},
      {"num_experts_per_tok", field(c, "num_experts_per_tok")},
      {"num_attention_heads", field(c, "num_attention_heads")},
      {"num_key_value_heads", field(c, "num_key_value_heads")},
      {"head_dim", field(c, "head_dim")},
      {"vocab_size", field(c, "vocab_size")},
      {"torch_dtype", first_of(c, {"torch_dtype", "dtype"})},
      {"quantization", quantization_summary(ck)},
      {"tensor_count", n},
      {"bytes_by_dtype", bytes},
      {"tensors_by_dtype", counts},
      {"total_bytes", total},
  };
}

// A JSON value for a human: strings bare, lists comma-separated, null as "-".
std::string plain(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string s;
    for (const auto& e : v) s += (s.empty() ? "" : ", ") + plain(e);
    return s.empty() ? "(none)" : s;
  }
  return v.dump();
}

std::string human_bytes(size_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? fmt::format("{} bytes", n) : fmt::format("{} bytes ({:.1f} {})", n, v, units[u]);
}

void print_human(const json& f, std::FILE* out) {
  auto line = [&](const std::string& label, const std::string& value) {
    fmt::print(out, "{:<22}{}\n", label, value);
  };
  auto line_if = [&](const std::string& label, const json& v) {
    if (!v.is_null()) line(label, plain(v));
  };
  line("model", plain(f["model"]));
  line("architecture", plain(f["architecture"]));
  line("layers", plain(f["num_layers"]));
  line("hidden size", plain(f["hidden_size"]));
  line("intermediate size", plain(f["intermediate_size"]));
  line_if("moe intermediate size", f["moe_intermediate_size"]);
  line_if("experts", f["num_experts"]);
  line_if("experts per token", f["num_experts_per_tok"]);
  line("attention heads", plain(f["num_attention_heads"]));
  line("kv heads", plain(f["num_key_value_heads"]));
  line_if("head dim", f["head_dim"]);
  line("vocab size", plain(f["vocab_size"]));
  line("torch dtype", plain(f["torch_dtype"]));
  const json& q = f["quantization"];
  if (q.is_null()) {
    line("quantization", "none");
  } else {
    line("quantization", fmt::format("{} (from {})", plain(q["quant_algo"]), plain(q["source"])));
    line("  group size", plain(q["group_size"]));
    line("  kv cache", plain(q["kv_cache_quant_algo"]));
    line("  exclude", plain(q["exclude_modules"]));
  }
  line("tensors", plain(f["tensor_count"]));
  for (const auto& [dt, count] : f["tensors_by_dtype"].items())
    line("  " + dt, fmt::format("{} tensors, {}", count.get<size_t>(),
                                human_bytes(f["bytes_by_dtype"][dt].get<size_t>())));
  line("total bytes", human_bytes(f["total_bytes"].get<size_t>()));
}

CommandRegistration reg(
    "inspect", "Describe a checkpoint: architecture, dimensions, quantization, tensors",
    [](CLI::App& sub) {
      struct Opts {
        std::string model;
        bool json = false;
      };
      auto o = std::make_shared<Opts>();
      sub.add_option("--model", o->model, "checkpoint directory (config.json + safetensors)")
          ->required();
      sub.add_flag("--json", o->json, "print the facts as one JSON object");
      return [o]() -> int {
        auto ck = io::Checkpoint::open(o->model);
        json facts = inspect_facts(*ck);
        if (o->json)
          fmt::print("{}\n", facts.dump(2));
        else
          print_human(facts, stdout);
        return 0;
      };
    });

}  // namespace
}  // namespace fp4lm::cli
