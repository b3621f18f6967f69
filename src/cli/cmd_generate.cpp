// `fp4lm generate`: load a checkpoint and generate from a prompt (text, chat message or ids),
// streaming the text to stdout; timings and memory on stderr, or one JSON object with --json.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/generator.h"
#include "engine/process_stats.h"
#include "model/causal_lm.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::cli {
namespace {

struct GenerateArgs {
  std::string model, prompt, prompt_ids, chat;
  int64_t max_tokens = 128, max_model_len = 0, top_k = 0;
  double temperature = 0.0, top_p = 1.0, min_p = 0.0;
  uint64_t seed = 0;
  bool json = false;
  EngineFlags flags;
};

std::vector<int32_t> parse_id_list(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    if (a == std::string::npos) usage_fail("--prompt-ids: empty entry in '{}'", s);
    item = item.substr(a, b - a + 1);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 0 || v > INT32_MAX)
      usage_fail("--prompt-ids: '{}' is not a non-negative token id", item);
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) usage_fail("--prompt-ids: no ids given");
  return ids;
}

int run_generate(const GenerateArgs& a) {
  const int sources = !a.prompt.empty() + !a.prompt_ids.empty() + !a.chat.empty();
  if (sources != 1) usage_fail("give exactly one of --prompt, --prompt-ids, --chat");
  if (a.max_model_len < 0) usage_fail("--max-model-len must be positive (got {})", a.max_model_len);
  engine::GenerationParams gp;
  gp.max_tokens = a.max_tokens;
  gp.sampling = {a.temperature, a.top_k, a.top_p, a.min_p, a.seed};
  engine::validate(gp.sampling);
  if (a.max_tokens < 0) usage_fail("--max-tokens must be >= 0 (got {})", a.max_tokens);
  model::EngineOptions opts = a.flags.resolve();

  // The tokenizer is optional when the prompt is given as ids.
  std::unique_ptr<tokenizer::Tokenizer> tok;
  const bool have_tok = std::filesystem::exists(std::filesystem::path(a.model) / "tokenizer.json");
  if (have_tok) tok = tokenizer::Tokenizer::from_dir(a.model);
  else if (a.prompt_ids.empty())
    fail("{}: no tokenizer.json, so --prompt/--chat cannot be encoded; give --prompt-ids", a.model);

  std::vector<int32_t> prompt;
  if (!a.prompt_ids.empty()) {
    prompt = parse_id_list(a.prompt_ids);
  } else if (!a.prompt.empty()) {
    prompt = tok->encode(a.prompt, /*add_special_tokens=*/true);
  } else {
    auto tmpl = tokenizer::ChatTemplate::from_dir(a.model);
    nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", a.chat}}});
    tokenizer::ChatOptions co;
    co.add_generation_prompt = true;
    prompt = tok->encode(tmpl.render(messages, co), /*add_special_tokens=*/false);
  }

  model::LoadOptions lo;
  lo.max_model_len = a.max_model_len;
  auto lm = model::CausalLM::load(a.model, opts, lo);
  log().info("memory: resident weight bytes {} ({:.1f} MiB), KV cache {} bytes per position; peak RSS {:.1f} MiB",
             lm->weight_bytes(), lm->weight_bytes() / 1048576.0,
             lm->sequence_bytes(1), engine::peak_rss_bytes() / 1048576.0);

  std::optional<tokenizer::StreamDecoder> stream;
  if (tok) stream.emplace(*tok, /*skip_special_tokens=*/true);
  bool first = true;
  auto on_token = [&](int32_t id) {
    if (a.json) return;
    if (stream) {
      std::string s = stream->push(id);
      std::fwrite(s.data(), 1, s.size(), stdout);
    } else {
      std::printf("%s%d", first ? "" : " ", id);
    }
    first = false;
    std::fflush(stdout);
  };
  engine::GenerationResult r = engine::generate(*lm, prompt, gp, on_token);

  std::string text;
  if (tok) text = tok->decode(r.output_ids, /*skip_special_tokens=*/true);
  if (a.json) {
    nlohmann::json j;
    j["prompt_ids"] = r.prompt_ids;
    j["output_ids"] = r.output_ids;
    j["text"] = text;
    j["finish_reason"] = r.finish_reason;
    j["timings"] = {{"load_s", lm->load_seconds()},
                    {"prefill_tok_s", r.prefill_tok_s()},
                    {"decode_tok_s", r.decode_tok_s()}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    if (stream) {
      std::string s = stream->flush();
      std::fwrite(s.data(), 1, s.size(), stdout);
    }
    std::printf("\n");
  }
  std::fflush(stdout);
  log().info("prompt: {} tokens in {:.3f} s ({:.2f} tokens/s); decode: {} tokens in {:.3f} s ({:.2f} tokens/s); "
             "finish: {}; peak RSS {:.1f} MiB",
             r.prompt_ids.size(), r.prefill_seconds, r.prefill_tok_s(), r.decode_steps, r.decode_seconds,
             r.decode_tok_s(), r.finish_reason, engine::peak_rss_bytes() / 1048576.0);
  return 0;
}

CommandRegistration reg("generate", "Generate text from a prompt", [](CLI::App& sub) {
  auto a = std::make_shared<GenerateArgs>();
  sub.add_option("--model", a->model, "Checkpoint directory")->required();
  sub.add_option("--prompt", a->prompt, "Prompt text (encoded with the checkpoint's tokenizer)");
  sub.add_option("--prompt-ids", a->prompt_ids, "Prompt as comma-separated token ids");
  sub.add_option("--chat", a->chat, "A user message, rendered with the checkpoint's chat template");
  sub.add_option("--max-tokens", a->max_tokens, "Most tokens to generate (default 128)");
  sub.add_option("--temperature", a->temperature, "0 = greedy (default)");
  sub.add_option("--top-k", a->top_k, "Keep the k most probable tokens (0 = all)");
  sub.add_option("--top-p", a->top_p, "Nucleus sampling mass (1 = off)");
  sub.add_option("--min-p", a->min_p, "Drop tokens below min_p x the top probability (0 = off)");
  sub.add_option("--seed", a->seed, "Sampling seed, 0 to 2^64-1 (same seed, same output)")
      ->check(CLI::Validator(
          [](std::string& v) { return v.rfind('-', 0) == 0 ? "must be from 0 to 2^64-1, got " + v : std::string(); },
          "SEED"));
  sub.add_option("--max-model-len", a->max_model_len,
                 "KV cache length (default min(max_position_embeddings, 8192))");
  sub.add_flag("--json", a->json, "Print one JSON object instead of streaming text");
  add_engine_flags(sub, a->flags);
  return [a]() { return run_generate(*a); };
});

}  // namespace
}  // namespace fp4lm::cli
