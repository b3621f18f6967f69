#include "quant/quant_config.h"

#include <cctype>

#include "core/error.h"
#include "quant/compressed_tensors_config.h"
#include "quant/fine_grained_fp8_config.h"
#include "quant/int4_producer_config.h"
#include "quant/modelopt_config.h"
#include "quant/mxfp4_config.h"

namespace fp4lm::quant {

using nlohmann::json;

std::string_view family_name(Family f) {
  switch (f) {
    case Family::modelopt: return "modelopt";
    case Family::compressed_tensors: return "compressed-tensors";
    case Family::fine_grained_fp8: return "fp8";
    case Family::mxfp4: return "mxfp4";
    case Family::gptq: return "gptq";
    case Family::awq: return "awq";
  }
  return "?";
}

std::string_view scheme_name(Scheme s) {
  switch (s) {
    case Scheme::unquantized: return "UNQUANTIZED";
    case Scheme::nvfp4: return "NVFP4";
    case Scheme::nvfp4_a16: return "W4A16_NVFP4";
    case Scheme::fp8: return "FP8";
    case Scheme::fp8_a16: return "FP8_W8A16";
    case Scheme::fp8_dynamic: return "FP8_DYNAMIC";
    case Scheme::fp8_block: return "FP8_BLOCK";
    case Scheme::fp8_block_a16: return "FP8_BLOCK_W8A16";
    case Scheme::mxfp4: return "MXFP4";
    case Scheme::int4: return "INT4_W4A16";
    case Scheme::nvfp4_fp8: return "W4A8_NVFP4_FP8";
    case Scheme::fp8_pc_pt: return "FP8_PER_CHANNEL_PER_TOKEN";
    case Scheme::mxfp8: return "MXFP8";
    case Scheme::int8_a16: return "W8A16";
    case Scheme::int8_sq: return "W8A8_SQ_PER_CHANNEL";
    case Scheme::mxfp4_fp8: return "W4A8_MXFP4_FP8";
  }
  return "?";
}

std::shared_ptr<const QuantConfig> parse_quant_config(const std::optional<json>& hf_quant_config,
                                                      const json& config_json, const std::string& dir) {
  std::string method;
  if (config_json.is_object() && config_json.contains("quantization_config") &&
      config_json["quantization_config"].is_object()) {
    const json& qc = config_json["quantization_config"];
    if (qc.contains("quant_method") && qc["quant_method"].is_string()) method = qc["quant_method"].get<std::string>();
  }
  std::string m = method;
  for (char& c : m) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string where = dir + "/config.json: quantization_config";
  if (m == "compressed-tensors" || m == "compressed_tensors") {
    if (hf_quant_config)
      fail("{}: quant_method is compressed-tensors but {}/hf_quant_config.json (ModelOpt's) is present too; "
           "remove the one that does not describe the tensors",
           where, dir);
    return std::make_shared<CompressedTensorsConfig>(
        parse_compressed_tensors_config(config_json["quantization_config"], where));
  }
  if (m == "fp8") {
    if (hf_quant_config)
      fail("{}: quant_method is fp8 but {}/hf_quant_config.json (ModelOpt's) is present too; remove the one that "
           "does not describe the tensors",
           where, dir);
    return std::make_shared<FineGrainedFp8Config>(
        parse_fine_grained_fp8_config(config_json["quantization_config"], where));
  }
  if (m == "mxfp4") {
    if (hf_quant_config)
      fail("{}: quant_method is mxfp4 but {}/hf_quant_config.json (ModelOpt's) is present too; remove the one that "
           "does not describe the tensors",
           where, dir);
    return std::make_shared<Mxfp4Config>(parse_mxfp4_config(config_json["quantization_config"], where));
  }
  if (m == "gptq" || m == "awq") {
    if (hf_quant_config)
      fail("{}: quant_method is {} but {}/hf_quant_config.json (ModelOpt's) is present too; remove the one that "
           "does not describe the tensors",
           where, m, dir);
    return std::make_shared<Int4ProducerConfig>(
        parse_int4_producer_config(config_json["quantization_config"], where, m == "gptq" ? Family::gptq : Family::awq));
  }
  if (m == "quark")
    // AMD Quark (docs/FORMAT.md, "AMD Quark"): no published description of the exported tensors;
    // vLLM's reader is the only one, and it marks only its emulation backend as tested.
    fail("{}: quant_method \"quark\" (AMD Quark) is refused: Quark documents no tensor format for its exports. "
         "For its NVFP4 export undocumented are the nibble order of the packed fp4 codes under export.pack_method "
         "(\"reorder\" / \"order\") and whether weight_scale_2 and input_scale_2 multiply or divide (vLLM reads "
         "them as ModelOpt's weight_scale_2 / input_scale and tests only its emulation backend); Quark's MXFP4, FP8 "
         "and int8 exports are not loaded either. Export with NVIDIA ModelOpt (hf_quant_config.json) or "
         "llm-compressor (compressed-tensors) instead",
         where);
  if (!m.empty() && m != "modelopt")
    fail("{}: unsupported quant_method '{}' (fp4lm loads \"modelopt\", \"compressed-tensors\", block-wise "
         "\"fp8\", \"mxfp4\", \"gptq\" and \"awq\"; bitsandbytes, HQQ, EXL2 and others are not supported)",
         where, method);
  return std::make_shared<ModeloptConfig>(parse_modelopt_config(hf_quant_config, config_json, dir));
}

}  // namespace fp4lm::quant
