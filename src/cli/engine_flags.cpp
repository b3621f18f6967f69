#include "cli/engine_flags.h"

#include "core/error.h"
#include "dist/pipeline.h"

namespace fp4lm::cli {

void add_engine_flags(CLI::App& sub, EngineFlags& f, bool with_dtype) {
  engine::EngineArgs& a = f.args;
  if (with_dtype)
    sub.add_option("--dtype", a.dtype, "Activation/KV dtype: auto (checkpoint's), float32, bfloat16, float16");
  sub.add_option("--override-activation-dtype", a.override_activation_dtype,
                 "auto|bfloat16|float16: run NVFP4 W4A4 layers through the W4A16 path at this dtype");
  sub.add_option("--activation-scale", a.activation_scale,
                 "static|dynamic: NVFP4 W4A4 layers quantize activations with the checkpoint's input_scale "
                 "(static, the default) or with each token's own scale, amax/2688 (dynamic; no input_scale needed)");
  if (with_dtype)
    sub.add_option("--kv-cache-dtype", a.kv_cache_dtype,
                   "auto (= the activation dtype)|float32|bfloat16|float16|fp8 (E4M3 with the checkpoint's "
                   "k_scale/v_scale)");
  sub.add_option("--linear-backend", a.linear_backend, "Force a Linear kernel backend (see `fp4lm backends`)");
  sub.add_option("--moe-backend", a.moe_backend, "Force a MoE kernel backend (see `fp4lm backends`)");
  sub.add_option("--a16-max-tokens", a.a16_max_tokens,
                 "W4A4 layers: calls with at most N tokens use the W4A16 kernel (0 = off)");
  sub.add_option("--threads", a.threads, "Worker threads (default: physical cores)");
}

void add_pipeline_flag(CLI::App& sub, EngineFlags& f) {
  sub.add_option("--pipeline-parallel-size", f.args.pipeline_parallel_size,
                 "Split the decoder layers over N processes started by `mpirun -np N` (one stage each; "
                 "README, \"More than one machine\")")
      ->check(CLI::Range(1, 1024));
  sub.add_option("--pipeline-heartbeat-timeout", f.pipeline_heartbeat_timeout,
                 "Seconds a pipeline rank may send no heartbeat before rank 0 fails the requests in flight "
                 "and ends the job (exit 1)")
      ->capture_default_str();
}

void add_model_flags(CLI::App& sub, std::string& model, ModelFlags& f, const std::string& help, bool with_tokenizer,
                     bool positional) {
  auto* opt = sub.add_option("--model", model, help + ", or a Hugging Face model id ORG/NAME (downloaded into the Hub cache)");
  if (positional)
    sub.add_option("model_tag", f.positional, "The model as the first argument, as `vllm serve MODEL` (or --model)");
  else
    opt->required();
  sub.add_option("--revision", f.revision, "Hub id: the branch, tag or commit (default main)");
  sub.add_option("--download-dir", f.download_dir,
                 "Hub id: the cache directory (default $HF_HUB_CACHE, else $HF_HOME/hub, else "
                 "~/.cache/huggingface/hub)");
  if (with_tokenizer)
    sub.add_option("--tokenizer", f.tokenizer,
                   "Read the tokenizer and chat template from this directory or Hub id instead of --model's");
}

void ModelFlags::resolve(std::string& model, io::hub::Need need) {
  if (!positional.empty()) {
    if (!model.empty() && model != positional)
      usage_fail("the model is given twice: '{}' and --model '{}'", positional, model);
    model = positional;
  }
  if (model.empty()) usage_fail("--model is required (a directory or a Hub id ORG/NAME)");
  io::ModelSourceOptions o;
  o.revision = revision;
  o.download_dir = download_dir;
  o.need = need;
  named = model;
  source = io::resolve_model_source(model, o);
  model = source.dir;
  tokenizer_dir = model;
  if (!tokenizer.empty()) {
    o.need = io::hub::Need::tokenizer_only;
    o.revision.clear();  // --revision names the model's revision
    tokenizer_dir = io::resolve_model_source(tokenizer, o).dir;
  }
}

std::chrono::milliseconds pipeline_heartbeat_timeout(const EngineFlags& f) {
  const double s = f.pipeline_heartbeat_timeout;
  if (!(s > 0) || s > 3600) usage_fail("--pipeline-heartbeat-timeout must be in (0, 3600] seconds (got {})", s);
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

engine::EngineConfig EngineFlags::config() const {
  return with_flag_errors([&] { return engine::create_engine_config(args); });
}

ModelRun::ModelRun(const EngineFlags& flags) : cfg_(flags.config()) {
  if (cfg_.pipeline_parallel_size > 1) heartbeat_ = pipeline_heartbeat_timeout(flags);
}

void ModelRun::join() {
  if (cfg_.pipeline_parallel_size > 1 && !pipeline_) pipeline_ = dist::Pipeline::join(cfg_.pipeline_parallel_size, heartbeat_);
}

ModelRun::~ModelRun() = default;

bool ModelRun::is_worker() const { return pipeline_ && !pipeline_->is_driver(); }

int ModelRun::run_worker(const std::string& dir) const { return pipeline_->run_worker(dir, cfg_.model, cfg_.load); }

engine::Runtime ModelRun::open(const std::string& dir) const {
  engine::Runtime::StageLoader stages;
  if (pipeline_)
    stages = [p = pipeline_.get()](const std::string& d, const model::EngineOptions& o, const model::LoadOptions& lo) {
      return p->load(d, o, lo);
    };
  return with_flag_errors([&] { return engine::Runtime::open(dir, cfg_, stages); });
}

}  // namespace fp4lm::cli
