#include "server/http_server.h"

#include <chrono>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "engine/process_stats.h"
#include "io/json_file.h"
#include "server/api_error.h"
#include "server/beam_search_response.h"
#include "server/api_key.h"
#include "server/generation_response.h"
#include "server/openai_request.h"
#include "server/request_fields.h"

namespace fp4lm::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// One route: who may call it without the key, and where it runs (the event loop answers only
// what is quick; bodies go to the workers).
struct HttpServer::Route {
  const char* method;
  const char* path;
  bool open;       // answered without the API key
  bool on_worker;  // parses a body: runs on a worker thread
  HttpResponse (HttpServer::*simple)(const HttpRequest&, int64_t&);  // null: a generation route
  bool chat;       // generation routes: chat or completions
};

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse error_response(const ApiError& e) { return HttpResponse{e.status, "application/json", {}, dump(e.to_json())}; }

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

void access_log(const HttpRequest& req, int status, int64_t prompt_tokens, int64_t completion_tokens, double ms) {
  log().info("{} \"{} {}\" {} prompt_tokens={} completion_tokens={} {:.1f} ms", req.remote_addr, log_escape(req.method),
             log_escape(req.path), status, prompt_tokens, completion_tokens, ms);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void append(HeaderFields& to, const HeaderFields& from) { to.insert(to.end(), from.begin(), from.end()); }

const HttpServer::Route* find_route(const std::vector<HttpServer::Route>& routes, const std::string& path) {
  for (const auto& r : routes)
    if (path == r.path) return &r;
  return nullptr;
}

TransportHandlers transport_handlers(std::function<std::optional<HttpResponse>(const HttpRequest&)> head,
                                     std::function<void(std::shared_ptr<Exchange>)> request) {
  TransportHandlers h;
  h.on_head = std::move(head);
  h.on_request = std::move(request);
  h.on_refused = [](const HttpRequest& req, int status, const std::string& why) {
    log().info("{} \"{} {}\" {} ({})", req.remote_addr, log_escape(req.method), log_escape(req.path), status,
               log_escape(why));
  };
  h.error_response = [](int status, const std::string& message) { return error_response(ApiError(status, message)); };
  return h;
}

}  // namespace

HttpServer::HttpServer(ServerOptions opts)
    : opts_(std::move(opts)),
      cors_(opts_.cors),
      transport_(opts_.limits,
                 transport_handlers(
                     [this](const HttpRequest& h) { return on_head(h); },
                     [this](std::shared_ptr<Exchange> ex) { on_request(ex); })),
      workers_(std::make_unique<WorkerPool>(opts_.workers)),
      image_worker_(std::make_unique<WorkerPool>(1)),
      rng_(std::random_device{}()),
      started_at_(unix_now()) {
  engine::map_large_allocations(size_t{1} << 20);  // request bodies of 1 MiB and more leave no trace
}

HttpServer::~HttpServer() {
  transport_.stop();
  workers_.reset();  // first: its jobs may queue image jobs
  image_worker_.reset();
}

uint64_t HttpServer::random_u64() {
  std::lock_guard lk(rng_mu_);
  return rng_();
}

std::string HttpServer::request_id(const char* prefix) {
  return fmt::format("{}{:016x}{:016x}", prefix, random_u64(), random_u64());
}

int HttpServer::bind() {
  opts_.port = transport_.bind(opts_.host, opts_.port);
  return opts_.port;
}

void HttpServer::start() { transport_.start(); }

void HttpServer::set_ready(engine::Engine& engine, const ServingModel& model, ServingMetrics& metrics) {
  model_ = &model;
  metrics_ = &metrics;
  engine_.store(&engine);
}

void HttpServer::shutdown() {
  shutting_down_ = true;
  const auto t0 = Clock::now();
  const auto grace = std::chrono::duration<double>(opts_.shutdown_grace_s);
  while (active_.load() > 0 && Clock::now() - t0 < grace) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (active_.load() > 0) {
    log().warn("shutdown: {} request(s) still running after {:.1f} s; aborting them", active_.load(),
               opts_.shutdown_grace_s);
    if (auto* e = engine_.load()) e->cancel_all();
    // Their responses now write the abort and finish; bounded so a stuck client cannot hold us.
    const auto t1 = Clock::now();
    while (active_.load() > 0 && Clock::now() - t1 < std::chrono::seconds(5))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  transport_.stop();
  workers_.reset();  // runs what is queued (each answers 503) while the model is still there
  image_worker_.reset();  // then the image jobs they queued (503 too)
}

// Before the body is read: CORS preflight, then the key, then availability, then the route.
std::optional<HttpResponse> HttpServer::on_head(const HttpRequest& head) {
  const auto reject = [&](const ApiError& e, HeaderFields extra = {}) {
    HttpResponse r = error_response(e);
    append(r.headers, extra);
    append(r.headers, cors_.response_fields(head));
    access_log(head, e.status, 0, 0, 0);
    return std::optional<HttpResponse>(std::move(r));
  };
  if (CorsPolicy::is_preflight(head)) {
    HttpResponse r = cors_.preflight(head);
    access_log(head, r.status, 0, 0, 0);
    return r;
  }
  // The chat page and its files: public (the page sends the key on its API calls), also while loading.
  if (web_asset(head)) return std::nullopt;
  const Route* route = find_route(route_table(), head.path);
  const bool open = route && (route->open || (route->simple == &HttpServer::metrics && opts_.open_metrics));
  if (!open && !authorized(head.header("Authorization"), opts_.api_key))
    return reject(ApiError(401, "Unauthorized: a valid API key is required (Authorization: Bearer KEY)"));
  if (shutting_down_) return reject(ApiError(503, "the server is shutting down"));
  if (!engine_.load() && head.path != "/version") return reject(ApiError(503, "the model is still loading"));
  if (!route) return reject(ApiError(404, fmt::format("Not Found: {} {}", log_escape(head.method), log_escape(head.path))));
  const bool method_ok = head.method == route->method || (head.method == "HEAD" && std::string(route->method) == "GET") ||
                         (head.path == "/ping" && head.method == "POST");  // vLLM answers /ping on GET and POST
  if (!method_ok)
    return reject(ApiError(405, fmt::format("Method Not Allowed: {} {}", log_escape(head.method), route->path)),
                  {{"Allow", route->method}});
  return std::nullopt;
}

void HttpServer::on_request(const std::shared_ptr<Exchange>& ex) {
  const Route* route = find_route(route_table(), ex->request().path);
  if (!route) {
    if (const EmbeddedFile* f = web_asset(ex->request())) {
      access_log(ex->request(), 200, 0, 0, 0);
      return ex->respond(web_asset_response(*f));
    }
    return ex->respond(error_response(ApiError(404, "Not Found")));
  }
  if (!route->simple) {
    const bool chat = route->chat;
    if (std::string_view(route->path) == "/invocations")
      return workers_->submit([this, ex] { generate(ex, std::nullopt); });
    return workers_->submit([this, ex, chat] { generate(ex, chat); });
  }
  if (route->on_worker) return workers_->submit([this, route, ex] { run_simple(*route, ex); });
  run_simple(*route, ex);
}

// A JSON route: ApiError -> its status; anything else -> 500; one access-log line.
void HttpServer::run_simple(const Route& route, const std::shared_ptr<Exchange>& ex) {
  const auto t0 = Clock::now();
  const HttpRequest& req = ex->request();
  int64_t prompt_tokens = 0;
  HttpResponse res;
  try {
    if (shutting_down_) throw ApiError(503, "the server is shutting down");
    res = (this->*route.simple)(req, prompt_tokens);
  } catch (const ApiError& e) {
    res = error_response(e);
  } catch (const engine::RequestError& e) {
    res = error_response(bad_request(e.what(), e.param));
  } catch (const std::exception& e) {
    res = error_response(ApiError(500, e.what()));
  }
  append(res.headers, cors_.response_fields(req));
  access_log(req, res.status, prompt_tokens, 0, ms_since(t0));
  ex->respond(std::move(res));
}

HttpResponse HttpServer::health(const HttpRequest&, int64_t&) { return HttpResponse{200, "", {}, ""}; }

HttpResponse HttpServer::version(const HttpRequest&, int64_t&) {
  return HttpResponse{200, "application/json", {}, dump({{"version", opts_.version}})};
}

HttpResponse HttpServer::metrics(const HttpRequest&, int64_t&) {
  return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", {}, metrics_->render(engine_.load()->load())};
}

const EmbeddedFile* HttpServer::web_asset(const HttpRequest& req) const {
  if (!opts_.web_ui || (req.method != "GET" && req.method != "HEAD")) return nullptr;
  return find_web_asset(req.path);
}

// What a client (the chat page) needs to know about the served model, in llama.cpp's /props
// shape: the sampling defaults (generation_config.json's values under vLLM's), the context, and
// the input modalities (vision: the page offers image attachments only then).
HttpResponse HttpServer::props(const HttpRequest&, int64_t&) {
  const SamplingDefaults& d = model_->defaults;
  const auto or_null = [](const auto& v) { return v ? json(*v) : json(nullptr); };
  const json from_file = {{"temperature", or_null(d.temperature)}, {"top_p", or_null(d.top_p)},
                          {"top_k", or_null(d.top_k)},             {"min_p", or_null(d.min_p)},
                          {"repetition_penalty", or_null(d.repetition_penalty)},
                          {"max_tokens", or_null(d.max_tokens)}};
  // What a request without the field gets (openai_request.cpp); max_tokens null: up to the context.
  const json params = {{"temperature", d.temperature.value_or(1.0)}, {"top_p", d.top_p.value_or(1.0)},
                       {"top_k", d.top_k.value_or(-1)},             {"min_p", d.min_p.value_or(0.0)},
                       {"repetition_penalty", d.repetition_penalty.value_or(1.0)},
                       {"max_tokens", or_null(d.max_tokens)}};
  const json out = {{"model", model_->name},
                    {"model_path", model_->path},
                    {"max_model_len", model_->max_model_len},
                    {"default_generation_settings", {{"params", params}, {"n_ctx", model_->max_model_len}}},
                    {"generation_config", from_file},
                    {"modalities", {{"vision", model_->vision}, {"audio", false}}},
                    {"chat_template", model_->chat != nullptr},
                    {"reasoning", model_->reasoning != ReasoningKind::none},
                    {"tool_calls", model_->tool_parser != nullptr},
                    {"api_key_required", !opts_.api_key.empty()},
                    {"webui", opts_.web_ui},
                    {"build_info", opts_.version}};
  return HttpResponse{200, "application/json", {}, dump(out)};
}

HttpResponse HttpServer::models(const HttpRequest&, int64_t&) {
  json card = {{"id", model_->name},
               {"object", "model"},
               {"created", started_at_},
               {"owned_by", "fp4lm"},
               {"root", model_->path},
               {"parent", nullptr},
               {"max_model_len", model_->max_model_len}};
  return HttpResponse{200, "application/json", {}, dump({{"object", "list"}, {"data", json::array({card})}})};
}

HttpResponse HttpServer::tokenize(const HttpRequest& req, int64_t& prompt_tokens) {
  const json b = parse_body(req.body);
  const nlohmann::ordered_json ordered = io::parse_ordered_json(req.body, "the request body");
  const TokenizeRequest t = parse_tokenize_request(b, *model_, &ordered);
  prompt_tokens = static_cast<int64_t>(t.ids.size());
  json out = {{"count", t.ids.size()}, {"max_model_len", model_->max_model_len}, {"tokens", t.ids}};
  if (t.return_token_strs) {
    json strs = json::array();
    for (int32_t id : t.ids) strs.push_back(model_->tok->id_to_token(id).value_or(""));
    out["token_strs"] = strs;
  } else {
    out["token_strs"] = nullptr;
  }
  return HttpResponse{200, "application/json", {}, dump(out)};
}

HttpResponse HttpServer::detokenize(const HttpRequest& req, int64_t&) {
  const std::vector<int32_t> ids = parse_detokenize_request(parse_body(req.body), *model_);
  return HttpResponse{200, "application/json", {}, dump({{"prompt", model_->tok->decode(ids, false)}})};
}

// On a worker: parse and admit the request; its answer then runs on the event loop. A chat
// request with images goes on to the image thread (attach_chat_images) before it is admitted.
void HttpServer::generate(const std::shared_ptr<Exchange>& ex, std::optional<bool> kind) {
  const auto t0 = Clock::now();
  bool chat = kind.value_or(false);
  try {
    if (shutting_down_) throw ApiError(503, "the server is shutting down");
    json b = parse_body(ex->request().body);
    if (!kind) {
      // /invocations (SageMaker), as vLLM dispatches it: the first request type the body is valid
      // for, chat completions before completions.
      if (present(b, "messages")) chat = true;
      else if (!present(b, "prompt"))
        throw bad_request("Cannot find suitable handler for request. Expected one of: ['ChatCompletionRequest', "
                          "'CompletionRequest']");
    }
    const uint64_t seed = random_u64();
    // Chat templates see messages and tools in the request's key order (a second, ordered parse).
    const nlohmann::ordered_json ordered = chat ? io::parse_ordered_json(ex->request().body, "the request body") : nullptr;
    ApiRequest ar = chat ? parse_chat_request(b, *model_, seed, &ordered) : parse_completion_request(b, *model_, seed);
    if (ar.images.empty()) return admit(ex, chat, std::move(ar), t0);
    // Decoding and the vision tower take long: one request at a time on their own thread, so that
    // text requests never queue behind them (the tower's kernels share the thread pool with the
    // engine's steps, job by job).
    auto job = std::make_shared<std::pair<ApiRequest, json>>(std::move(ar), std::move(b));
    image_worker_->submit([this, ex, chat, t0, job] {
      try {
        if (shutting_down_) throw ApiError(503, "the server is shutting down");
        attach_chat_images(job->first, job->second, *model_);
        job->second = nullptr;  // the request body (its images' data) is not needed any more
        if (shutting_down_) throw ApiError(503, "the server is shutting down");  // it began while encoding
        admit(ex, chat, std::move(job->first), t0);
      } catch (...) {
        fail(ex, t0, std::current_exception());
      }
    });
  } catch (...) {
    fail(ex, t0, std::current_exception());
  }
}

void HttpServer::admit(const std::shared_ptr<Exchange>& ex, bool chat, ApiRequest ar, Clock::time_point t0) {
  const HttpRequest& req = ex->request();
  if (ar.beam) {
    // Beam search: its steps run through the engine while this worker waits (never streamed).
    const json resp = beam_search_response(ar, *model_, *engine_.load(), request_id(chat ? "chatcmpl-" : "cmpl-"),
                                           unix_now(), [this] { return shutting_down_.load(); });
    HttpResponse r{200, "application/json", {}, dump(resp)};
    append(r.headers, cors_.response_fields(req));
    access_log(req, 200, resp["usage"]["prompt_tokens"].get<int64_t>(), resp["usage"]["completion_tokens"].get<int64_t>(),
               ms_since(t0));
    ex->respond(std::move(r));
    return;
  }
  // One engine request per sample (best_of, by default n, of each prompt); a refusal cancels those
  // queued.
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  const size_t choices = ar.prompts.size() * static_cast<size_t>(ar.samples());
  try {
    for (size_t c = 0; c < choices; ++c) handles.push_back(engine_.load()->submit(choice_params(ar, c)));
  } catch (...) {
    for (auto& h : handles) h->cancel();
    throw;  // RequestError -> 400
  }
  ++active_;
  auto answer = std::make_shared<GenerationResponse>(ex, std::move(ar), *model_,
                                                     request_id(chat ? "chatcmpl-" : "cmpl-"), unix_now(),
                                                     std::move(handles), cors_.response_fields(req),
                                                     [this] { --active_; });
  answer->start();
}

// A generation request that failed before it was admitted: ApiError -> its status, RequestError
// -> 400, anything else -> 500.
void HttpServer::fail(const std::shared_ptr<Exchange>& ex, Clock::time_point t0, std::exception_ptr error) {
  const HttpRequest& req = ex->request();
  HttpResponse r;
  try {
    std::rethrow_exception(error);
  } catch (const ApiError& e) {
    r = error_response(e);
  } catch (const engine::RequestError& e) {
    r = error_response(bad_request(e.what(), e.param));
  } catch (const std::exception& e) {
    r = error_response(ApiError(500, e.what()));
  }
  append(r.headers, cors_.response_fields(req));
  access_log(req, r.status, 0, 0, ms_since(t0));
  ex->respond(std::move(r));
}

const std::vector<HttpServer::Route>& HttpServer::route_table() {
  static const std::vector<HttpServer::Route> routes = {
      {"GET", "/health", true, false, &HttpServer::health, false},
      {"GET", "/version", true, false, &HttpServer::version, false},
      {"GET", "/metrics", false, false, &HttpServer::metrics, false},
      {"GET", "/v1/models", false, false, &HttpServer::models, false},
      {"GET", "/props", false, false, &HttpServer::props, false},
      {"POST", "/tokenize", false, true, &HttpServer::tokenize, false},
      {"POST", "/detokenize", false, true, &HttpServer::detokenize, false},
      {"POST", "/v1/completions", false, true, nullptr, false},
      {"POST", "/v1/chat/completions", false, true, nullptr, true},
      // vLLM's SageMaker routes: /invocations is chat or completions by the body; /ping is /health.
      {"POST", "/invocations", false, true, nullptr, false},
      {"GET", "/ping", true, false, &HttpServer::health, false},
      // llama-server's paths without /v1 (its clients and test suite use them): the same handlers.
      {"GET", "/models", false, false, &HttpServer::models, false},
      {"GET", "/v1/health", true, false, &HttpServer::health, false},
      {"POST", "/completions", false, true, nullptr, false},
      {"POST", "/chat/completions", false, true, nullptr, true},
  };
  return routes;
}

}  // namespace fp4lm::server
