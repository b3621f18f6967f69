// `fp4lm serve`: an OpenAI-compatible HTTP server (src/server) over the continuous-batching
// engine (src/engine). The port is bound before the model loads (/health: 503, then 200);
// SIGINT/SIGTERM stop it gracefully and exit 0.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include <sys/resource.h>
#include <unistd.h>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/pipeline.h"
#include "engine/engine.h"
#include "engine/image_input.h"
#include "engine/media_url.h"
#include "engine/mm_limits.h"
#include "engine/runtime.h"
#include "model/causal_lm.h"
#include "server/api_key.h"
#include "server/cors.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/serving_model.h"
#include "server/tool_call_parser.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::cli {
namespace {

struct ServeArgs {
  std::string model, host = "127.0.0.1", served_model_name, kv_cache_memory;
  ModelFlags hub;
  std::optional<std::string> api_key;
  std::string api_key_file;
  bool open_metrics = false;
  bool no_webui = false;
  int port = 8000;
  double shutdown_grace = 5;
  // HTTP limits (README "Limits"); defaults are TransportLimits'.
  double header_timeout = 10, keep_alive_timeout = 5, body_timeout = 60, body_silence_timeout = 10;
  int64_t max_connections = 1024, max_connections_per_ip = 256, max_header_bytes = 16384,
          max_body_bytes = int64_t{64} << 20;
  std::string allowed_origins = "*", allowed_methods = "*", allowed_headers = "*";
  bool allow_credentials = false;
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser, reasoning_parser;
  bool disable_any_whitespace = false;  // constrained JSON: docs/STRUCTURED_OUTPUTS.md
  int max_whitespace = 20;
  bool enable_prompt_tokens_details = false;
  bool enable_force_include_usage = false, return_tokens_as_token_ids = false;
  std::string allowed_local_media_path, limit_mm_per_prompt;
  std::vector<std::string> allowed_media_domains;
  EngineFlags flags;
};

std::chrono::milliseconds seconds_flag(double s, const char* flag) {
  if (!(s > 0) || s > 86400) usage_fail("{} must be in (0, 86400] seconds (got {})", flag, s);
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

size_t count_flag(int64_t v, int64_t lo, const char* flag) {
  if (v < lo) usage_fail("{} must be >= {} (got {})", flag, lo, v);
  return static_cast<size_t>(v);
}

// Every connection is a descriptor: raises the soft limit to the hard one and, when that is still
// short of `max_connections` plus a margin for model files and logs, caps the connections to fit
// (with a warning) instead of failing accepts later.
size_t open_file_budget(size_t max_connections) {
  constexpr rlim_t kMargin = 64;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return max_connections;
  if (lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
    getrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= max_connections + kMargin) return max_connections;
  const size_t fit = lim.rlim_cur > 2 * kMargin ? static_cast<size_t>(lim.rlim_cur - kMargin) : 1;
  log().warn("serve: --max-connections {} lowered to {} (open-file limit {})", max_connections, fit,
             static_cast<uint64_t>(lim.rlim_cur));
  return fit;
}

// The HTTP front end's options from the flags (usage errors name the flag).
server::ServerOptions server_options(const ServeArgs& a) {
  server::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.api_key = server::resolve_api_key(a.api_key, a.api_key_file, std::getenv("FP4LM_API_KEY")).value_or("");
  so.open_metrics = a.open_metrics;
  so.web_ui = !a.no_webui;
  so.shutdown_grace_s = a.shutdown_grace;
  so.version = FP4LM_VERSION;
  auto& l = so.limits;
  l.header_timeout = seconds_flag(a.header_timeout, "--header-timeout");
  l.keep_alive_timeout = seconds_flag(a.keep_alive_timeout, "--keep-alive-timeout");
  l.body_timeout = seconds_flag(a.body_timeout, "--body-timeout");
  l.body_silence_timeout = seconds_flag(a.body_silence_timeout, "--body-silence-timeout");
  l.max_connections = open_file_budget(count_flag(a.max_connections, 1, "--max-connections"));
  l.max_connections_per_ip = count_flag(a.max_connections_per_ip, 1, "--max-connections-per-ip");
  l.max_header_bytes = count_flag(a.max_header_bytes, 1024, "--max-header-bytes");
  l.max_line_bytes = std::min<size_t>(l.max_line_bytes, l.max_header_bytes);
  l.max_body_bytes = count_flag(a.max_body_bytes, 1, "--max-body-bytes");
  so.cors.allowed_origins = server::parse_cors_list(a.allowed_origins, "--allowed-origins");
  so.cors.allowed_methods = server::parse_cors_list(a.allowed_methods, "--allowed-methods");
  so.cors.allowed_headers = server::parse_cors_list(a.allowed_headers, "--allowed-headers");
  so.cors.allow_credentials = a.allow_credentials;
  return so;
}

// "1073741824", "512MiB", "4GiB", "4G" -> bytes.
size_t parse_bytes(const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    usage_fail("--kv-cache-memory: '{}' is not a size (e.g. 4294967296, 512MiB, 4GiB)", s);
  }
  std::string unit = s.substr(used);
  double mult = 1;
  if (unit == "" || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KiB" || unit == "KB") mult = 1024.0;
  else if (unit == "M" || unit == "MiB" || unit == "MB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB" || unit == "GB") mult = 1024.0 * 1024 * 1024;
  else usage_fail("--kv-cache-memory: unknown unit '{}' in '{}' (use B, KiB, MiB or GiB)", unit, s);
  if (!(v > 0)) usage_fail("--kv-cache-memory must be positive (got '{}')", s);
  return static_cast<size_t>(v * mult);
}

int g_signal_pipe[2] = {-1, -1};

void on_stop_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &b, 1);
}

int run_serve(ServeArgs& a) {
  // SIGINT/SIGTERM only write their number to a pipe the main thread reads (any thread may take
  // a signal: some libraries start threads before main), so the stop is always the graceful one.
  if (pipe(g_signal_pipe) != 0) fail("serve: cannot create the signal pipe");
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hung up is a failed write, not a dead server
  if (a.port < 0 || a.port > 65535) usage_fail("--port must be in [0, 65535] (got {})", a.port);
  if (a.shutdown_grace < 0) usage_fail("--shutdown-grace must be >= 0 (got {})", a.shutdown_grace);
  const server::ServerOptions so = server_options(a);
  std::unique_ptr<server::ToolCallParser> tool_parser;
  if (!a.tool_call_parser.empty()) tool_parser = server::make_tool_call_parser(a.tool_call_parser);
  if (a.enable_auto_tool_choice && !tool_parser)
    usage_fail("--enable-auto-tool-choice needs --tool-call-parser ({})", fmt::join(server::tool_call_parser_names(), ", "));
  const server::ReasoningKind reasoning = server::reasoning_kind(a.reasoning_parser);
  const int64_t image_limit = engine::image_limit(a.limit_mm_per_prompt, "--limit-mm-per-prompt");
  engine::MediaUrlOptions media;
  if (!a.allowed_local_media_path.empty())
    media.allowed_local_media_path = engine::canonical_media_dir(a.allowed_local_media_path);
  media.allowed_media_domains = engine::media_domains(a.allowed_media_domains);
  if (!a.kv_cache_memory.empty()) a.flags.args.kv_cache_memory_bytes = parse_bytes(a.kv_cache_memory);
  ModelRun run(a.flags);  // every engine flag checked
  engine::SchedulerConfig sc = run.config().scheduler;
  sc.prebuild_structured_vocabulary = true;  // the first structured request does not wait for it
  {
    // A Hub download may take long: until it ends, Ctrl-C / SIGTERM end the process at once, as
    // they end any command (its .incomplete files are resumed by the next run).
    struct sigaction dfl {}, old_int {}, old_term {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGINT, &dfl, &old_int);
    sigaction(SIGTERM, &dfl, &old_term);
    a.hub.resolve(a.model);
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
  if (!std::filesystem::is_directory(a.model)) fail("{}: not a checkpoint directory", a.model);
  // Under mpirun every rank runs this command: ranks > 0 only load and run their stage; rank 0
  // serves HTTP and drives the pipeline.
  run.join();
  if (run.is_worker()) return run.run_worker(a.model);
  dist::Pipeline* pipeline = run.pipeline();

  server::HttpServer http(so);
  const int port = http.bind();
  http.start();
  log().info("serve: listening on http://{}:{} (loading {})", a.host, port, a.model);

  const engine::TextFront text = engine::TextFront::open(a.hub.tokenizer_dir);
  if (!text.tokenizer)
    log().warn("serve: {} has no tokenizer.json: prompts must be token ids and outputs carry no text",
               a.hub.tokenizer_dir);
  else if (!text.chat)
    log().warn("serve: no chat template ({}); /v1/chat/completions will answer 400", text.chat_error);
  // A lost rank wakes the main thread like a signal (below).
  if (pipeline)
    pipeline->on_lost([](const std::string&) {
      const unsigned char b = 'L';
      [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &b, 1);
    });
  // A DiffusionGemma checkpoint loads too (Runtime::load_any): the engine runs it a canvas a step.
  const engine::Runtime rt = run.open(a.model);

  server::ServingModel sm;
  sm.name = a.served_model_name.empty() ? a.hub.named : a.served_model_name;  // the id or path as given
  sm.path = a.model;
  sm.tok = text.tokenizer.get();
  sm.chat = text.chat ? &*text.chat : nullptr;
  sm.max_model_len = rt.max_model_len();
  sm.vocab_size = rt.vocab_size();
  sm.eos_ids = rt.eos_ids();
  sm.defaults = engine::sampling_defaults_from(rt.generation_config());
  if (rt.diffusion()) sm.canvas_length = rt.diffusion()->config().canvas_length;
  sm.tool_parser = a.enable_auto_tool_choice ? tool_parser.get() : nullptr;
  sm.reasoning = reasoning;
  if (a.max_whitespace < 0 || a.max_whitespace > 1000)
    usage_fail("--structured-outputs-max-whitespace must be in [0, 1000] (got {})", a.max_whitespace);
  sm.json_whitespace = {a.disable_any_whitespace, a.max_whitespace};
  sm.prompt_tokens_details = a.enable_prompt_tokens_details;
  sm.force_include_usage = a.enable_force_include_usage;
  sm.return_tokens_as_token_ids = a.return_tokens_as_token_ids;
  sm.max_logprobs = sc.max_logprobs;
  // Image parts need the vision tower's front; a checkpoint whose image side cannot be read
  // still serves text (image parts then answer 400 naming the model). Pipeline stages run text only.
  std::unique_ptr<engine::ImageInput> image_input;
  if (!pipeline && !rt.diffusion()) {
    try {
      image_input = engine::ImageInput::for_model(rt.model(), a.model);
    } catch (const Error& e) {
      log().warn("serve: the model's vision tower is loaded, but image inputs are off: {}", e.what());
    }
  }
  sm.images = image_input.get();
  sm.vision = sm.images != nullptr;
  sm.media = media;
  sm.image_limit = image_limit;

  server::ServingMetrics metrics(sm.name, sm.max_model_len);
  engine::Engine eng(rt, text.tokenizer.get(), sc, metrics.observer());
  http.set_ready(eng, sm, metrics);
  if (rt.diffusion())
    log().info("serve: DiffusionGemma: up to max_num_seqs requests batched, a decoder pass over each one's canvas "
               "of {} tokens a step (docs/RUNTIME.md)",
               sm.canvas_length);
  log().info("serve: ready: model '{}' (max_model_len {}, max_num_seqs {}, max_num_batched_tokens {}, KV budget "
             "{:.1f} MiB = {} sequences of max_model_len)",
             sm.name, sm.max_model_len, sc.max_num_seqs, sc.max_num_batched_tokens, sc.kv_cache_bytes / 1048576.0,
             sc.kv_cache_bytes / std::max<size_t>(1, eng.sequence_bytes(sm.max_model_len)));
  if (so.web_ui) log().info("serve: chat page at http://{}:{}/ (--no-webui turns it off)", a.host, port);

  unsigned char sig = 0;
  while (read(g_signal_pipe[0], &sig, 1) != 1) {
  }
  // Under a pipeline, a lost rank (no heartbeat), or a SIGTERM while a rank is silent (mpirun
  // sends it to every rank about a second after one died), fails the requests in flight with
  // the reason and ends the whole job with exit 1.
  if (pipeline) {
    if (const std::string lost = pipeline->lost(sig == 'L' ? std::chrono::milliseconds{} : std::chrono::milliseconds{600});
        !lost.empty()) {
      log().error("serve: {}; failing the requests in flight and ending the job", lost);
      http.shutdown();
      pipeline->abort(1);
    }
  }
  log().info("serve: {} received: no new requests; finishing in-flight ones (grace {:.1f} s)",
             sig == SIGINT ? "SIGINT" : "SIGTERM", a.shutdown_grace);
  http.shutdown();
  log().info("serve: stopped");
  return 0;
}

CommandRegistration reg("serve", "OpenAI-compatible HTTP server with continuous batching", [](CLI::App& sub) {
  auto a = std::make_shared<ServeArgs>();
  add_model_flags(sub, a->model, a->hub, "Checkpoint directory", /*with_tokenizer=*/true, /*positional=*/true);
  sub.add_option("--host", a->host, "Address to listen on")->capture_default_str();
  sub.add_option("--port", a->port, "Port (0 = any free port; the log names it)")->capture_default_str();
  sub.add_option("--served-model-name", a->served_model_name, "Model name in the API (default: --model)");
  sub.add_option("--api-key", a->api_key,
                 "Require 'Authorization: Bearer KEY' on every endpoint but /health and /version (also from "
                 "--api-key-file or the environment variable FP4LM_API_KEY, which keep it out of `ps`)");
  sub.add_option("--api-key-file", a->api_key_file, "Read the API key from the first line of this file");
  sub.add_flag("--open-metrics", a->open_metrics, "Serve /metrics without the API key");
  sub.add_flag("--no-webui,--disable-web-ui", a->no_webui,
               "No chat page at / (llama.cpp's flag; without it / serves the page, which needs no API key while its "
               "API calls do)");
  sub.add_option("--header-timeout", a->header_timeout, "Seconds a request head may take, from its first byte")
      ->capture_default_str();
  sub.add_option("--keep-alive-timeout", a->keep_alive_timeout, "Seconds an idle connection waits for a request")
      ->capture_default_str();
  sub.add_option("--body-timeout", a->body_timeout, "Seconds a request body may take")->capture_default_str();
  sub.add_option("--body-silence-timeout", a->body_silence_timeout,
                 "Seconds a request body may pause before its end (then 408 and close)")
      ->capture_default_str();
  sub.add_option("--max-connections", a->max_connections, "Open connections at most (then the longest-idle closes)")
      ->capture_default_str();
  sub.add_option("--max-connections-per-ip", a->max_connections_per_ip, "Open connections per client address at most")
      ->capture_default_str();
  sub.add_option("--max-header-bytes", a->max_header_bytes, "Request line + header section, bytes")
      ->capture_default_str();
  sub.add_option("--max-body-bytes", a->max_body_bytes, "Request body (after chunked decoding), bytes")
      ->capture_default_str();
  sub.add_option("--allowed-origins", a->allowed_origins, "CORS origins (JSON list or comma-separated)")
      ->capture_default_str();
  sub.add_option("--allowed-methods", a->allowed_methods, "CORS methods")->capture_default_str();
  sub.add_option("--allowed-headers", a->allowed_headers, "CORS request headers")->capture_default_str();
  sub.add_flag("--allow-credentials", a->allow_credentials, "CORS: allow credentials");
  sub.add_flag("--enable-auto-tool-choice", a->enable_auto_tool_choice,
               "tool_choice \"auto\" (the default with tools): parse tool calls with --tool-call-parser");
  sub.add_option("--tool-call-parser", a->tool_call_parser, "hermes, qwen3_coder, llama3_json, mistral, deepseek_v3 or openai (gpt-oss)");
  sub.add_option("--reasoning-parser", a->reasoning_parser,
                 "qwen3 or deepseek_r1 (<think>...</think> becomes reasoning_content), openai_gptoss (gpt-oss's harmony channels)");
  sub.add_option("--max-num-seqs", a->flags.args.max_num_seqs, "Most sequences running at once")->capture_default_str();
  sub.add_option("--max-num-batched-tokens", a->flags.args.max_num_batched_tokens, "Most tokens in one engine step")
      ->capture_default_str();
  sub.add_option("--kv-cache-memory", a->kv_cache_memory,
                 "KV-cache budget for admission, bytes or with KiB/MiB/GiB (default: 25% of RAM)");
  sub.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", a->flags.args.enable_prefix_caching,
               "Reuse the K/V of cached prompt prefixes (automatic prefix caching; on by default)");
  sub.add_option("--block-size", a->flags.args.block_size, "Tokens per prefix-cache block")->capture_default_str();
  sub.add_option("--speculative-config", a->flags.args.speculative_config,
                 "Speculative decoding, vLLM's JSON: '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                 "\"prompt_lookup_max\": 4}'");
  sub.add_option("--max-model-len", a->flags.args.max_model_len,
                 "Context length per sequence (default min(max_position_embeddings, 8192))");
  sub.add_option("--shutdown-grace", a->shutdown_grace, "Seconds in-flight requests get on SIGTERM/SIGINT")
      ->capture_default_str();
  sub.add_flag("--structured-outputs-config.disable_any_whitespace", a->disable_any_whitespace,
               "Constrained JSON without free whitespace (\", \" and \": \" only; vLLM's option; a request's "
               "structured_outputs.disable_any_whitespace overrides it)");
  sub.add_option("--structured-outputs-max-whitespace", a->max_whitespace,
                 "Constrained JSON: blanks after a newline between tokens, at most")
      ->capture_default_str();
  sub.add_flag("--enable-prompt-tokens-details", a->enable_prompt_tokens_details,
               "usage.prompt_tokens_details.cached_tokens, the prompt tokens the prefix cache supplied (vLLM's "
               "flag; without it the field is null, as vLLM)");
  sub.add_flag("--enable-force-include-usage", a->enable_force_include_usage,
               "Every stream carries usage, in each chunk and a last chunk, whatever stream_options says (vLLM's flag)");
  sub.add_flag("--return-tokens-as-token-ids", a->return_tokens_as_token_ids,
               "Logprob tokens as 'token_id:N' unless a request's return_tokens_as_token_ids says otherwise (vLLM's flag)");
  sub.add_option("--max-logprobs", a->flags.args.max_logprobs,
                 "The most logprobs a request may ask for (top_logprobs, logprobs, prompt_logprobs); -1: no cap, "
                 "the whole vocabulary (vLLM's flag)")
      ->capture_default_str();
  sub.add_option("--allowed-local-media-path", a->allowed_local_media_path,
                 "Image parts may be file:// URLs of files under this directory (vLLM's flag; without it file:// "
                 "URLs answer 400)");
  sub.add_option("--allowed-media-domains", a->allowed_media_domains,
                 "Image parts may be http(s) URLs of these hosts (vLLM's flag; fetched with a 5 s timeout, no "
                 "redirects, at most 64 MiB; without it http(s) URLs answer 400)");
  sub.add_option("--limit-mm-per-prompt", a->limit_mm_per_prompt,
                 "Most images per prompt, vLLM's JSON: '{\"image\": 2}' (default 999; more answer 400)");
  add_engine_flags(sub, a->flags);
  add_pipeline_flag(sub, a->flags);
  return [a]() { return run_serve(*a); };
});

}  // namespace
}  // namespace fp4lm::cli
