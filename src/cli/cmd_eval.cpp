// `fp4lm eval`: teacher-forced scoring of token-id sequences (JSON Lines): tokens, mean NLL
// (nats per predicted token) and perplexity; --dump-logits also writes every position's logits.
// Under `mpirun -np N ... --pipeline-parallel-size N` the stages score exactly as one process.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/runtime.h"
#include "engine/evaluator.h"
#include "engine/id_file.h"
#include "engine/logits_dump.h"
#include "engine/process_stats.h"
#include "engine/reference_compare.h"
#include "model/causal_lm.h"

namespace fp4lm::cli {
namespace {

struct EvalArgs {
  std::string model, ids;
  std::string reference;  // --reference DIR: also report KL(R‖Q) and top-1 agreement
  std::string dump_logits;  // --dump-logits FILE: every position's logits as JSON Lines
  bool json = false;
  EngineFlags flags;
  ModelFlags hub;
};

// --reference: the same sequences through a reference model (same --dtype, default backends, no
// override, KV cache in the activation dtype), compared position by position
// (engine/reference_compare.h). `--reference` = `--model` with `--kv-cache-dtype fp8` measures
// the FP8 KV cache alone.
int run_eval_reference(const EvalArgs& a, const model::CausalLM& lm, const std::vector<std::vector<int32_t>>& seqs,
                       model::EngineOptions opts, const model::LoadOptions& lo) {
  opts.override_activation_dtype.reset();
  opts.dynamic_activation_scale = false;
  opts.linear_backend.clear();
  opts.moe_backend.clear();
  opts.a16_max_tokens = 0;
  opts.kv_cache_dtype = "auto";
  auto ref = model::CausalLM::load(a.reference, opts, lo);
  auto t0 = std::chrono::steady_clock::now();
  engine::ReferenceComparison c = engine::compare_to_reference(lm, *ref, seqs);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log().info("scored {} tokens of {} sequences against {} in {:.2f} s; peak RSS {:.1f} MiB", c.model.tokens,
             c.model.sequences, a.reference, secs, engine::peak_rss_bytes() / 1048576.0);
  if (a.json) {
    nlohmann::json j = {{"sequences", c.model.sequences},
                        {"tokens", c.model.tokens},
                        {"mean_nll", c.model.mean_nll()},
                        {"perplexity", c.model.perplexity()},
                        {"reference", {{"model", a.reference},
                                       {"mean_nll", c.reference.mean_nll()},
                                       {"perplexity", c.reference.perplexity()},
                                       {"mean_kl", c.mean_kl()},
                                       {"top1_agreement", c.top1_agreement()}}},
                        {"timings", {{"load_s", lm.load_seconds()}, {"eval_s", secs}}}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("sequences: %lld\ntokens: %lld\nmean_nll: %.6f\nperplexity: %.4f\nreference_perplexity: %.4f\n"
                "mean_kl: %.6f\ntop1_agreement: %.4f\n",
                static_cast<long long>(c.model.sequences), static_cast<long long>(c.model.tokens), c.model.mean_nll(),
                c.model.perplexity(), c.reference.perplexity(), c.mean_kl(), c.top1_agreement());
  }
  return 0;
}

int run_eval(EvalArgs& a) {
  ModelRun run(a.flags);  // every engine flag checked
  a.hub.resolve(a.model);
  if (!a.reference.empty()) {  // a directory or Hub id too, from the same cache
    io::ModelSourceOptions ro;
    ro.download_dir = a.hub.download_dir;
    a.reference = io::resolve_model_source(a.reference, ro).dir;
  }
  // Under mpirun every rank runs this command: ranks > 0 only load and run their stage (they need
  // the checkpoint, not the ids file).
  if (!a.reference.empty() && run.config().pipeline_parallel_size > 1)
    usage_fail("--reference runs in one process; drop --pipeline-parallel-size");
  run.join();
  if (run.is_worker()) return run.run_worker(a.model);
  auto seqs = engine::read_id_sequences(a.ids);
  // Perplexity over zero predicted tokens would print 1.0 as if it meant something.
  if (std::none_of(seqs.begin(), seqs.end(), [](const auto& s) { return s.size() >= 2; }))
    fail("{}: nothing to score: no sequence has 2 or more tokens", a.ids);
  const engine::Runtime rt = run.open(a.model);
  const model::CausalLM& lm = rt.model();
  if (!a.dump_logits.empty()) {
    engine::write_logits_jsonl(rt.step_model(), seqs, a.dump_logits);  // through the stages under a pipeline
    log().info("wrote the logits of every position of {} sequences to {}", seqs.size(), a.dump_logits);
  }
  if (!a.reference.empty()) return run_eval_reference(a, lm, seqs, run.config().model, run.config().load);
  auto t0 = std::chrono::steady_clock::now();
  engine::EvalResult r = engine::evaluate(rt.step_model(), seqs);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log().info("scored {} tokens of {} sequences in {:.2f} s ({:.1f} tokens/s); peak RSS {:.1f} MiB", r.tokens,
             r.sequences, secs, secs > 0 ? r.tokens / secs : 0.0, engine::peak_rss_bytes() / 1048576.0);
  if (a.json) {
    nlohmann::json j = {{"sequences", r.sequences},
                        {"tokens", r.tokens},
                        {"mean_nll", r.mean_nll()},
                        {"perplexity", r.perplexity()},
                        {"timings", {{"load_s", lm.load_seconds()}, {"eval_s", secs}}}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("sequences: %lld\ntokens: %lld\nmean_nll: %.6f\nperplexity: %.4f\n",
                static_cast<long long>(r.sequences), static_cast<long long>(r.tokens), r.mean_nll(), r.perplexity());
  }
  return 0;
}

CommandRegistration reg("eval", "Teacher-forced perplexity of token-id sequences", [](CLI::App& sub) {
  auto a = std::make_shared<EvalArgs>();
  add_model_flags(sub, a->model, a->hub, "Checkpoint directory");
  sub.add_option("--ids", a->ids,
                 "JSON Lines file: per line {\"ids\": [...]}, {\"prompt_ids\", \"greedy_continuation\"} or a bare list")
      ->required();
  sub.add_option("--max-model-len", a->flags.args.max_model_len, "Longest sequence (default min(max_position_embeddings, 8192))");
  sub.add_flag("--json", a->json, "Print one JSON object");
  sub.add_option("--reference", a->reference,
                 "Reference checkpoint: also report mean KL(reference||model) per token and top-1 agreement");
  sub.add_option("--dump-logits", a->dump_logits,
                 "Also write every position's logits, one JSON line per sequence: {\"sequence\", \"ids\", "
                 "\"vocab\", \"logits\": [[vocab floats] per position]}");
  add_engine_flags(sub, a->flags);
  add_pipeline_flag(sub, a->flags);
  return [a]() { return run_eval(*a); };
});

}  // namespace
}  // namespace fp4lm::cli
