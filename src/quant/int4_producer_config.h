#pragma once
// The int4 producers' configs (docs/FORMAT.md, "int4"): config.json's quantization_config of
//  - GPTQ (quant_method "gptq": AutoGPTQ, GPTQModel, transformers' GPTQConfig): bits, group_size,
//    desc_act, sym, checkpoint_format / format ("gptq": zero points stored minus one; "gptq_v2":
//    as they are), lm_head, dynamic, pack_dtype;
//  - AutoAWQ (quant_method "awq"): bits, group_size, zero_point, version ("gemm"),
//    modules_to_not_convert.
// Which modules are int4 is what their tensors hold (`qweight`); the config gives the grouping.
// A key with an effect fp4lm cannot reproduce (bits other than 4, a GEMV / Marlin / ExLlama /
// BitBLAS layout, GPTQModel's per-module `dynamic` overrides, AWQ without zero points) is an Error
// naming it; the calibration and kernel-choice keys (damp_percent, true_sequential, use_exllama,
// ...) have no effect on the stored weights and are accepted; any other key is an Error naming it.
#include <string>
#include <vector>

#include "quant/quant_config.h"

namespace fp4lm::quant {

struct Int4ProducerConfig final : QuantConfig {
  Family producer = Family::gptq;  // gptq or awq
  std::string source_path;
  int64_t group_size = -1;  // -1: one group per row
  bool sym = true;          // GPTQ's sym (AWQ: zero_point true, never symmetric)
  bool desc_act = false;    // GPTQ
  bool zeros_minus_one = false;  // GPTQ v1
  std::string version;           // GPTQ's checkpoint_format, AWQ's version, as written
  std::vector<std::string> not_converted;  // AWQ's modules_to_not_convert

  Family family() const override { return producer; }
  const std::string& source() const override { return source_path; }
  bool quantized() const override { return true; }
  std::string describe() const override;
  std::optional<std::string> kv_cache_scheme() const override { return std::nullopt; }
  bool declares(Scheme s) const override { return s == Scheme::int4; }
  Scheme module_scheme(const std::string& module, const ModuleTensors& tensors) const override;
  Int4Layout int4_layout(const std::string& module) const override;
  bool excluded(const std::string& module) const override;
  bool exclusions_decide() const override { return false; }
  std::shared_ptr<const QuantConfig> with_prefix(const std::string& from, const std::string& to) const override;
};

// config.json's quantization_config with quant_method "gptq" or "awq" (`producer`); `where` names it.
Int4ProducerConfig parse_int4_producer_config(const nlohmann::json& qc, const std::string& where, Family producer);

}  // namespace fp4lm::quant
