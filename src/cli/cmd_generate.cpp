// `fp4lm generate`: load a checkpoint and run one request (text, chat message or ids) through the
// engine's scheduler, with the server's sampling parameters and semantics, streaming the text to
// stdout; timings and memory on stderr, or one JSON object with --json.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/generate_diffusion.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/runtime.h"
#include "engine/engine_args.h"
#include "engine/generator.h"
#include "engine/image_input.h"
#include "engine/process_stats.h"
#include "model/causal_lm.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::cli {
namespace {

struct GenerateArgs {
  std::string model, prompt, prompt_ids, chat, stop_token_ids;
  std::vector<std::string> stop, images;
  int64_t max_tokens = 128, min_tokens = 0, top_k = 0, logprobs = -1;
  double temperature = 0.0, top_p = 1.0, min_p = 0.0;
  double presence_penalty = 0, frequency_penalty = 0, repetition_penalty = 1;
  uint64_t seed = 0;
  bool ignore_eos = false, skip_special_tokens = true, json = false;
  EngineFlags flags;
  ModelFlags hub;
};

std::vector<int32_t> parse_id_list(const std::string& s, const char* flag) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a == std::string::npos) usage_fail("{}: empty entry in '{}'", flag, s);
    item = item.substr(a, b - a + 1);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX)
      usage_fail("{}: '{}' is not a non-negative token id", flag, item);
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) usage_fail("{}: no ids given", flag);
  return ids;
}

// The request, field for field as the server's /v1/completions reads it.
engine::RequestParams request_of(const GenerateArgs& a, std::vector<int32_t> prompt) {
  engine::RequestParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = a.max_tokens;
  p.min_tokens = a.min_tokens;
  // As the server: below 1e-5 is greedy; a negative temperature stays, for the validator to refuse.
  const bool greedy = a.temperature >= 0 && a.temperature < 1e-5;
  p.sampling = {greedy ? 0.0 : a.temperature, a.top_k == -1 ? 0 : a.top_k, a.top_p, a.min_p, a.seed};
  p.stop = a.stop;
  std::erase(p.stop, std::string());
  if (!a.stop_token_ids.empty()) p.stop_token_ids = parse_id_list(a.stop_token_ids, "--stop-token-ids");
  p.ignore_eos = a.ignore_eos;
  p.presence_penalty = a.presence_penalty;
  p.frequency_penalty = a.frequency_penalty;
  p.repetition_penalty = a.repetition_penalty;
  p.logprobs = a.logprobs;
  p.skip_special_tokens = a.skip_special_tokens;
  return p;
}

std::vector<int32_t> prompt_of(const GenerateArgs& a, const engine::TextFront& text) {
  const tokenizer::Tokenizer* tok = text.tokenizer.get();
  if (!a.prompt_ids.empty()) return parse_id_list(a.prompt_ids, "--prompt-ids");
  if (!a.prompt.empty()) return tok->encode(a.prompt, /*add_special_tokens=*/true);
  if (!text.chat) fail("{}", text.chat_error);
  const tokenizer::ChatTemplate& tmpl = *text.chat;
  // With --image, one user message of content parts, the images before the text, as vLLM and
  // transformers build it; the template writes each image's placeholder.
  nlohmann::json content = a.chat;
  if (!a.images.empty()) {
    content = nlohmann::json::array();
    for (size_t k = 0; k < a.images.size(); ++k) content.push_back({{"type", "image"}});
    content.push_back({{"type", "text"}, {"text", a.chat}});
  }
  nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", content}}});
  tokenizer::ChatOptions co;
  co.add_generation_prompt = true;
  return tok->encode(tmpl.render(messages, co), /*add_special_tokens=*/false);
}

nlohmann::json result_json(const engine::GenerationResult& r, const model::CausalLM& lm, bool with_logprobs) {
  nlohmann::json j;
  j["prompt_ids"] = r.prompt_ids;
  j["output_ids"] = r.output_ids;
  j["text"] = r.text;
  j["finish_reason"] = r.finish_reason;
  j["stop_reason"] = r.stop_reason ? nlohmann::json(*r.stop_reason)
                                   : r.stop_token ? nlohmann::json(*r.stop_token) : nlohmann::json(nullptr);
  if (with_logprobs) {
    j["logprobs"] = nlohmann::json::array();
    for (const auto& lp : r.logprobs) j["logprobs"].push_back({{"id", lp.id}, {"logprob", lp.logprob}, {"top", lp.top}});
  }
  j["timings"] = {{"load_s", lm.load_seconds()}, {"prefill_tok_s", r.prefill_tok_s()}, {"decode_tok_s", r.decode_tok_s()}};
  return j;
}

std::vector<uint8_t> image_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) usage_fail("--image: cannot read '{}'", path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// --image: each file through the model's vision tower, attached to the prompt's placeholders
// (one <|image_pad|> per image, written by the chat template for --chat, by the user otherwise).
void attach_images(const GenerateArgs& a, const std::vector<std::vector<uint8_t>>& files, const model::CausalLM& lm,
                   engine::RequestParams& p) {
  const auto input = engine::ImageInput::for_model(lm, a.model);
  if (!input)
    usage_fail("--image: model '{}' has no vision tower fp4lm runs: it does not accept image inputs", a.model);
  std::vector<engine::EncodedImage> encoded;
  with_flag_errors([&] {
    for (size_t k = 0; k < files.size(); ++k) encoded.push_back(input->encode(files[k], a.images[k], static_cast<int64_t>(files.size())));
    input->attach(p, std::move(encoded), lm.max_model_len());
  });
}

int run_generate(GenerateArgs& a) {
  const int sources = !a.prompt.empty() + !a.prompt_ids.empty() + !a.chat.empty();
  if (sources != 1) usage_fail("give exactly one of --prompt, --prompt-ids, --chat");
  ModelRun run(a.flags);  // every engine flag checked
  // Parameter errors before the (slow) load: the same validator runs again with the model's
  // vocabulary and context.
  with_flag_errors([&] { engine::validate(request_of(a, {}).sampling); });
  a.hub.resolve(a.model);
  // Under mpirun every rank runs this command: ranks > 0 only load and run their stage.
  run.join();
  if (run.is_worker()) return run.run_worker(a.model);

  // The tokenizer is optional when the prompt is given as ids.
  const engine::TextFront text = engine::TextFront::open(a.hub.tokenizer_dir);
  const std::unique_ptr<tokenizer::Tokenizer>& tok = text.tokenizer;
  const std::string& tok_dir = a.hub.tokenizer_dir;
  if (!tok && a.prompt_ids.empty())
    fail("{}: no tokenizer.json, so --prompt/--chat cannot be encoded; give --prompt-ids", tok_dir);
  if (!a.stop.empty() && !tok) usage_fail("--stop needs a tokenizer, and {} has none; use --stop-token-ids", tok_dir);
  engine::RequestParams params = request_of(a, prompt_of(a, text));
  if (is_diffusion_checkpoint(a.model)) {
    // Not a CausalLM: its own loop (engine/diffusion_generator.h); the flags it has no use for refused.
    const std::string unsupported = !a.images.empty()                              ? "--image"
                                    : run.config().scheduler.speculative.enabled() ? "--speculative-config"
                                    : run.pipeline()                               ? "--pipeline-parallel-size"
                                                                                   : "";
    return run_diffusion_generate(a.model, tok.get(), std::move(params), run.config().model, a.json, unsupported);
  }
  if (!a.images.empty() && run.pipeline()) usage_fail("--image does not run with --pipeline-parallel-size > 1");
  std::vector<std::vector<uint8_t>> image_files;  // read before the (slow) load
  for (const std::string& path : a.images) image_files.push_back(image_file(path));
  const engine::SpeculativeConfig& spec = run.config().scheduler.speculative;
  const engine::Runtime rt = run.open(a.model);
  const model::CausalLM* lm = &rt.model();
  log().info("memory: resident weight bytes {} ({:.1f} MiB), KV cache {} bytes per position; peak RSS {:.1f} MiB",
             lm->weight_bytes(), lm->weight_bytes() / 1048576.0,
             lm->sequence_bytes(1), engine::peak_rss_bytes() / 1048576.0);

  if (!a.images.empty()) attach_images(a, image_files, *lm, params);

  bool first = true;
  auto on_output = [&](const engine::RequestOutput& out) {
    if (a.json) return;
    if (tok) {
      std::fwrite(out.text.data(), 1, out.text.size(), stdout);
    } else {
      for (int32_t id : out.token_ids) std::printf("%s%d", std::exchange(first, false) ? "" : " ", id);
    }
    std::fflush(stdout);
  };
  const engine::GenerationResult r = with_flag_errors([&] {
    try {
      return engine::generate(rt.step_model(), tok.get(), std::move(params), on_output, spec);
    } catch (const engine::RequestError& e) {
      if (e.param == "prompt") throw UsageError(e.what());  // given as --prompt, --prompt-ids or --chat
      throw;
    }
  });
  if (a.json) std::printf("%s\n", result_json(r, *lm, a.logprobs >= 0).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  else std::printf("\n");
  std::fflush(stdout);
  log().info("prompt: {} tokens in {:.3f} s ({:.2f} tokens/s); decode: {} tokens in {:.3f} s ({:.2f} tokens/s); "
             "finish: {}; peak RSS {:.1f} MiB",
             r.prompt_ids.size(), r.prefill_seconds, r.prefill_tok_s(), r.decode_tokens, r.decode_seconds,
             r.decode_tok_s(), r.finish_reason, engine::peak_rss_bytes() / 1048576.0);
  if (r.draft_tokens > 0)
    log().info("speculative decoding: {} of {} draft tokens accepted ({:.1f}%), {} decode steps", r.accepted_tokens,
               r.draft_tokens, 100.0 * static_cast<double>(r.accepted_tokens) / static_cast<double>(r.draft_tokens),
               r.decode_steps);
  return 0;
}

CommandRegistration reg("generate", "Generate text from a prompt", [](CLI::App& sub) {
  auto a = std::make_shared<GenerateArgs>();
  add_model_flags(sub, a->model, a->hub, "Checkpoint directory", /*with_tokenizer=*/true);
  sub.add_option("--prompt", a->prompt, "Prompt text (encoded with the checkpoint's tokenizer)");
  sub.add_option("--prompt-ids", a->prompt_ids, "Prompt as comma-separated token ids");
  sub.add_option("--chat", a->chat, "A user message, rendered with the checkpoint's chat template");
  sub.add_option("--image", a->images,
                 "An image file (PNG/JPEG/...; repeat for more): with --chat, placed before the text in the "
                 "message; with --prompt/--prompt-ids, one <|image_pad|> each in the prompt");
  // The server's sampling parameters, under their vLLM names in flag spelling.
  sub.add_option("--max-tokens", a->max_tokens, "Most tokens to generate, at least 1 (default 128)");
  sub.add_option("--min-tokens", a->min_tokens, "EOS and stop ids are masked before this many tokens");
  sub.add_option("--temperature", a->temperature, "0 = greedy (default)");
  sub.add_option("--top-k", a->top_k, "Keep the k most probable tokens (0 or -1 = all)");
  sub.add_option("--top-p", a->top_p, "Nucleus sampling mass (1 = off)");
  sub.add_option("--min-p", a->min_p, "Drop tokens below min_p x the top probability (0 = off)");
  sub.add_option("--seed", a->seed, "Sampling seed, 0 to 2^64-1 (same seed, same output)")
      ->check(CLI::Validator(
          [](std::string& v) { return v.rfind('-', 0) == 0 ? "must be from 0 to 2^64-1, got " + v : std::string(); },
          "SEED"));
  sub.add_option("--stop", a->stop, "A stop string (repeat for more): generation ends before it");
  sub.add_option("--stop-token-ids", a->stop_token_ids, "Comma-separated ids that end generation like EOS");
  sub.add_flag("--ignore-eos", a->ignore_eos, "Keep generating past EOS");
  sub.add_option("--presence-penalty", a->presence_penalty, "In [-2, 2] (0 = off)");
  sub.add_option("--frequency-penalty", a->frequency_penalty, "In [-2, 2] (0 = off)");
  sub.add_option("--repetition-penalty", a->repetition_penalty, "In (0, 2] (1 = off)");
  sub.add_option("--logprobs", a->logprobs, "Report each token's logprob and the top N (0-20; -1 = none)");
  sub.add_option("--skip-special-tokens", a->skip_special_tokens, "Leave special tokens out of the text (true)");
  sub.add_option("--max-model-len", a->flags.args.max_model_len,
                 "KV cache length (default min(max_position_embeddings, 8192))");
  sub.add_flag("--json", a->json, "Print one JSON object instead of streaming text");
  sub.add_option("--speculative-config", a->flags.args.speculative_config,
                 "Speculative decoding, vLLM's JSON: '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'");
  add_engine_flags(sub, a->flags);
  add_pipeline_flag(sub, a->flags);
  return [a]() { return run_generate(*a); };
});

}  // namespace
}  // namespace fp4lm::cli
