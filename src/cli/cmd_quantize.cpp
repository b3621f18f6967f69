// `fp4lm quantize`: a bf16/fp16/fp32 checkpoint -> a ModelOpt-layout NVFP4 or W4A16_NVFP4
// checkpoint (engine/quantize/quantizer.h), with max calibration for NVFP4's input scales.
#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "core/interrupt_cleanup.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/quantize/calibration_data.h"
#include "engine/quantize/quantizer.h"
#include "quant/export_format.h"

namespace fp4lm::cli {
namespace {

struct QuantizeArgs {
  std::string model, out, algo, calib_ids, max_shard_size = "5GB", format = "modelopt", weight_method = "auto";
  std::vector<std::string> calib_text;
  int64_t calib_samples = 128, calib_seq_len = 512;
  std::vector<std::string> exclude;
  bool quantize_lm_head = false, force = false, act_order = true;
  bool act_order_given = false, awq = false, awq_given = false;
  ModelFlags hub;
  int threads = 0;
};

// Test seam: FP4LM_QUANTIZE_TEST_ABORT_AFTER=N makes the run fail after N output tensors
// (N:kill kills the process instead), to prove an interrupted run leaves no OUT.
std::function<void(const std::string&)> test_abort_hook() {
  const char* v = std::getenv("FP4LM_QUANTIZE_TEST_ABORT_AFTER");
  if (!v || !*v) return {};
  std::string s(v);
  const bool kill = s.size() > 5 && s.compare(s.size() - 5, 5, ":kill") == 0;
  const long after = std::strtol(s.c_str(), nullptr, 10);
  auto count = std::make_shared<long>(0);
  return [count, after, kill](const std::string& name) {
    if (++*count < after) return;
    if (kill) std::raise(SIGKILL);
    fail("interrupted after writing tensor '{}' (FP4LM_QUANTIZE_TEST_ABORT_AFTER)", name);
  };
}

// Where --awq is on unless --no-awq: the algorithms whose row with AWQ + gptq beats gptq alone
// on SmolLM2 (docs/ACCURACY.md).
bool awq_by_default(quant::QuantAlgo algo) {
  return algo == quant::QuantAlgo::NVFP4 || algo == quant::QuantAlgo::W4A16_NVFP4;
}

int run_quantize(QuantizeArgs& a) {
  install_interrupt_cleanup();  // Ctrl-C removes the hidden temporary directory, as an error does
  if (a.threads < 0) usage_fail("--threads must be >= 1 (got {})", a.threads);
  if (a.threads > 0) ThreadPool::set_global_threads(a.threads);
  engine::QuantizeOptions o;
  o.model_dir = a.model;
  o.out_dir = a.out;
  const std::string algo = [&] {
    std::string u;
    for (char c : a.algo) u += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return u;
  }();
  if (algo == "NVFP4") o.exp.algo = quant::QuantAlgo::NVFP4;
  else if (algo == "W4A16_NVFP4") o.exp.algo = quant::QuantAlgo::W4A16_NVFP4;
  else usage_fail("--algo: '{}' is not supported (use NVFP4 or W4A16_NVFP4)", a.algo);
  if (a.format == "modelopt") o.format = quant::Family::modelopt;
  else if (a.format == "compressed-tensors") o.format = quant::Family::compressed_tensors;
  else usage_fail("--format: '{}' is not supported (use modelopt or compressed-tensors)", a.format);
  o.exp.exclude = a.exclude;
  o.exp.quantize_lm_head = a.quantize_lm_head;
  o.max_shard_bytes = quant::parse_byte_size(a.max_shard_size, "--max-shard-size");
  o.force = a.force;
  o.producer_version = FP4LM_VERSION;
  o.after_tensor = test_abort_hook();
  if (!a.calib_ids.empty() && !a.calib_text.empty()) usage_fail("give --calib-ids or --calib-text, not both");
  if (a.calib_samples <= 0) usage_fail("--calib-samples must be positive (got {})", a.calib_samples);
  if (a.calib_seq_len <= 1) usage_fail("--calib-seq-len must be at least 2 (got {})", a.calib_seq_len);
  a.hub.resolve(a.model);
  o.model_dir = a.model;
  const bool have_calib = !a.calib_ids.empty() || !a.calib_text.empty();
  // auto: GPTQ when there is calibration data to build its H from, else the scale search
  // (docs/QUANTIZE.md: the measurements behind the choice).
  if (a.weight_method == "auto") o.weight_method = have_calib ? engine::WeightMethod::gptq : engine::WeightMethod::search;
  else if (a.weight_method == "rtn") o.weight_method = engine::WeightMethod::rtn;
  else if (a.weight_method == "search") o.weight_method = engine::WeightMethod::search;
  else if (a.weight_method == "gptq") o.weight_method = engine::WeightMethod::gptq;
  else usage_fail("--weight-method: '{}' is not supported (use auto, rtn, search or gptq)", a.weight_method);
  if (o.exp.algo == quant::QuantAlgo::NVFP4 && !have_calib)
    usage_fail("--algo NVFP4 (W4A4) needs calibration data for its input scales: pass --calib-ids FILE.jsonl or "
               "--calib-text FILE (W4A16_NVFP4 needs none)");
  if (o.weight_method == engine::WeightMethod::gptq && !have_calib)
    usage_fail("--weight-method gptq needs calibration data: pass --calib-ids FILE.jsonl or --calib-text FILE");
  o.act_order = a.act_order;
  // Default (docs/ACCURACY.md, the measurements behind it): AWQ with gptq, in ModelOpt's format.
  o.awq = a.awq_given ? a.awq
                      : have_calib && o.weight_method == engine::WeightMethod::gptq && awq_by_default(o.exp.algo) &&
                            o.format == quant::Family::modelopt;  // compressed-tensors has no pre_quant_scale
  if (o.awq && !have_calib)
    usage_fail("--awq needs calibration data for each layer's input statistics: pass --calib-ids FILE.jsonl or "
               "--calib-text FILE");
  if (a.act_order_given && o.weight_method != engine::WeightMethod::gptq)
    usage_fail("--act-order / --no-act-order apply to --weight-method gptq only (the method is {})",
               engine::weight_method_name(o.weight_method));
  const bool uses_calib =
      o.exp.algo == quant::QuantAlgo::NVFP4 || o.weight_method != engine::WeightMethod::rtn || o.awq;
  if (have_calib && uses_calib)
    o.calibration = !a.calib_ids.empty()
                        ? engine::calibration_from_ids(a.calib_ids, a.calib_samples, a.calib_seq_len)
                        : engine::calibration_from_files(a.calib_text, a.model, a.calib_samples, a.calib_seq_len);
  else if (have_calib)
    log().warn("--algo W4A16_NVFP4 with --weight-method rtn has no use for calibration data: it is not used");
  log().info("Weight rounding: {}{}{}", engine::weight_method_name(o.weight_method),
             o.weight_method == engine::WeightMethod::search && o.calibration.empty() ? " (unweighted: no calibration data)" : "",
             o.awq ? ", after AWQ's per-channel scaling (pre_quant_scale)" : "");

  engine::QuantizeSummary s = engine::quantize_checkpoint(o);
  log().info("Wrote {} ({}): {} quantized modules, {} tensors, {:.1f} MiB in {} file(s), {} modules excluded; {:.2f} s",
             a.out, algo, s.quantized_modules, s.tensors, static_cast<double>(s.tensor_bytes) / (1 << 20),
             s.shard_files.size(), s.exclude_modules.size(), s.seconds);
  return 0;
}

CommandRegistration reg("quantize", "Quantize a bf16/fp16/fp32 checkpoint to NVFP4 or W4A16_NVFP4 (ModelOpt layout)",
                        [](CLI::App& sub) {
  auto a = std::make_shared<QuantizeArgs>();
  add_model_flags(sub, a->model, a->hub, "Input checkpoint directory (bf16, fp16 or fp32)");
  sub.add_option("--out", a->out, "Output directory (must not exist unless --force)")->required();
  sub.add_option("--algo", a->algo, "NVFP4 (W4A4, needs calibration) or W4A16_NVFP4")->required();
  sub.add_option("--format", a->format,
                 "Output layout: modelopt (default: hf_quant_config.json, weight / weight_scale_2 / input_scale) or "
                 "compressed-tensors (weight_packed, reciprocal weight_global_scale / input_global_scale)");
  sub.add_option("--calib-ids", a->calib_ids, "Calibration token ids, JSON Lines ({\"ids\": [...]} or a list per line)");
  sub.add_option("--calib-text", a->calib_text,
                 "Calibration files (one or more, in order): plain text encoded with the model's tokenizer, or a chat "
                 "dataset (a name ending in .jsonl: {\"messages\": [...]} per line, rendered with the model's chat template)");
  sub.add_option("--weight-method", a->weight_method,
                 "Weight rounding: auto (default: gptq with calibration data, else search), rtn (ModelOpt's amax/6 "
                 "block scale, round to nearest), search (least-error E4M3 block scale), gptq (error feedback on X^T X)");
  sub.add_option("--calib-samples", a->calib_samples, "Calibration sequences to use (default 128)");
  sub.add_option("--calib-seq-len", a->calib_seq_len, "Tokens per calibration sequence (default 512)");
  CLI::Option* act = sub.add_flag(
      "--act-order,!--no-act-order", a->act_order,
      "gptq: quantize columns in decreasing input energy, block scales chosen up front from the weights "
      "(default on; --no-act-order: natural order, each block's scale from the error-updated weights)");
  CLI::Option* awq = sub.add_flag(
      "--awq,!--no-awq", a->awq,
      "AWQ (ModelOpt's awq_lite): scale each Linear's weights per input channel by an activation-aware factor "
      "searched on the calibration data, its input by the inverse (pre_quant_scale tensors; NVFP4 is written as "
      "NVFP4_AWQ). Needs calibration data. Default: on with gptq (the default with calibration data), else off");
  sub.add_option("--exclude", a->exclude, "Keep matching modules unquantized (exact, dot-prefix or glob; repeatable)");
  sub.add_flag("--quantize-lm-head", a->quantize_lm_head, "Quantize lm_head too (kept unquantized by default)");
  sub.add_option("--max-shard-size", a->max_shard_size, "Largest output shard (default 5GB; GB=10^9, GiB=2^30)");
  sub.add_flag("--force", a->force, "Replace OUT if it exists");
  sub.add_option("--threads", a->threads, "Worker threads (default: physical cores)");
  return [a, act, awq]() {
    a->act_order_given = act->count() > 0;
    a->awq_given = awq->count() > 0;
    return run_quantize(*a);
  };
});

}  // namespace
}  // namespace fp4lm::cli
