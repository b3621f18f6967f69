#include "server/http_server.h"

#include <chrono>

#include <fmt/format.h>
#include <httplib.h>

#include "core/error.h"
#include "core/log.h"
#include "server/api_error.h"
#include "server/client_hangup.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/sse.h"

namespace fp4lm::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);
constexpr auto kStreamKeepAlive = std::chrono::milliseconds(1000);

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(e.to_json()), "application/json");
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void access_log(const httplib::Request& req, int status, int64_t prompt_tokens, int64_t completion_tokens,
                double ms) {
  log().info("{} \"{} {}\" {} prompt_tokens={} completion_tokens={} {:.1f} ms", req.remote_addr, req.method, req.path,
             status, prompt_tokens, completion_tokens, ms);
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Everything a streaming response needs after its handler has returned.
struct StreamState {
  ApiRequest req;
  std::unique_ptr<ResponseBuilder> rb;
  std::shared_ptr<engine::RequestHandle> handle;
  Clock::time_point start, last_write;
  bool done = false;
};

}  // namespace

HttpServer::HttpServer(ServerOptions opts)
    : opts_(std::move(opts)), svr_(std::make_unique<httplib::Server>()), rng_(std::random_device{}()),
      started_at_(unix_now()) {
  const size_t threads = static_cast<size_t>(std::max(opts_.http_threads, 4));
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr_->set_tcp_nodelay(true);
  svr_->set_keep_alive_max_count(1000);
  svr_->set_keep_alive_timeout(5);
  svr_->set_payload_max_length(64u << 20);
  routes();
}

HttpServer::~HttpServer() {
  if (listener_.joinable()) {
    svr_->stop();
    listener_.join();
  }
}

uint64_t HttpServer::random_u64() {
  std::lock_guard lk(rng_mu_);
  return rng_();
}

std::string HttpServer::request_id(const char* prefix) {
  return fmt::format("{}{:016x}{:016x}", prefix, random_u64(), random_u64());
}

int HttpServer::bind() {
  if (opts_.port == 0) {
    const int port = svr_->bind_to_any_port(opts_.host);
    if (port < 0) fail("serve: cannot bind {} on any port", opts_.host);
    opts_.port = port;
  } else if (!svr_->bind_to_port(opts_.host, opts_.port)) {
    fail("serve: cannot bind {}:{} (in use, or not an address of this machine)", opts_.host, opts_.port);
  }
  return opts_.port;
}

void HttpServer::start() {
  listener_ = std::thread([this] { svr_->listen_after_bind(); });
}

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
    // Their handlers now write the abort and finish; bounded so a stuck client cannot hold us.
    const auto t1 = Clock::now();
    while (active_.load() > 0 && Clock::now() - t1 < std::chrono::seconds(5))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  svr_->stop();
  if (listener_.joinable()) listener_.join();
}

void HttpServer::routes() {
  httplib::Server& s = *svr_;

  // Authentication and availability before any route: 401 on a missing/wrong key (health,
  // metrics and version stay open), 503 while loading or shutting down.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool open = req.path == "/health" || req.path == "/metrics" || req.path == "/version";
    auto reject = [&](const ApiError& e) {
      send_error(res, e);
      access_log(req, e.status, 0, 0, 0);
      return httplib::Server::HandlerResponse::Handled;
    };
    if (!opts_.api_key.empty() && !open && req.get_header_value("Authorization") != "Bearer " + opts_.api_key)
      return reject(ApiError(401, "Unauthorized: a valid API key is required (Authorization: Bearer KEY)"));
    if (shutting_down_) return reject(ApiError(503, "the server is shutting down"));
    if (!engine_.load() && req.path != "/version") return reject(ApiError(503, "the model is still loading"));
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string msg = res.status == 404 ? fmt::format("Not Found: {} {}", req.method, req.path)
                                              : fmt::format("HTTP {}", res.status);
    send_error(res, ApiError(res.status, msg));
    access_log(req, res.status, 0, 0, 0);
  });
  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string msg = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      msg = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, msg));
    access_log(req, 500, 0, 0, 0);
  });

  // Runs a JSON handler: ApiError -> its status; anything else -> 500; one access-log line
  // (streams log when they end).
  auto json_route = [](auto fn) {
    return [fn](const httplib::Request& req, httplib::Response& res) {
      const auto t0 = Clock::now();
      int64_t prompt = 0, completion = 0;
      bool streaming = false;
      try {
        fn(req, res, prompt, completion, streaming);
      } catch (const ApiError& e) {
        send_error(res, e);
      } catch (const engine::RequestError& e) {
        send_error(res, bad_request(e.what(), e.param));
      } catch (const std::exception& e) {
        send_error(res, ApiError(500, e.what()));
      }
      if (!streaming) access_log(req, res.status == -1 ? 200 : res.status, prompt, completion, ms_since(t0));
    };
  };

  s.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
    res.status = 200;
    (void)req;
  });
  s.Get("/version", json_route([this](const httplib::Request&, httplib::Response& res, int64_t&, int64_t&, bool&) {
          res.set_content(dump({{"version", opts_.version}}), "application/json");
        }));
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->render(engine_.load()->load()), "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/v1/models", json_route([this](const httplib::Request&, httplib::Response& res, int64_t&, int64_t&, bool&) {
          json card = {{"id", model_->name},
                       {"object", "model"},
                       {"created", started_at_},
                       {"owned_by", "fp4lm"},
                       {"root", model_->path},
                       {"parent", nullptr},
                       {"max_model_len", model_->max_model_len}};
          res.set_content(dump({{"object", "list"}, {"data", json::array({card})}}), "application/json");
        }));

  s.Post("/tokenize", json_route([this](const httplib::Request& req, httplib::Response& res, int64_t& prompt,
                                        int64_t&, bool&) {
           const TokenizeRequest t = parse_tokenize_request(parse_body(req.body), *model_);
           const std::vector<int32_t>& ids = t.ids;
           prompt = static_cast<int64_t>(ids.size());
           json out = {{"count", ids.size()}, {"max_model_len", model_->max_model_len}, {"tokens", ids}};
           if (t.return_token_strs) {
             json strs = json::array();
             for (int32_t id : ids) strs.push_back(model_->tok->id_to_token(id).value_or(""));
             out["token_strs"] = strs;
           } else {
             out["token_strs"] = nullptr;
           }
           res.set_content(dump(out), "application/json");
         }));
  s.Post("/detokenize", json_route([this](const httplib::Request& req, httplib::Response& res, int64_t&, int64_t&,
                                          bool&) {
           const std::vector<int32_t> ids = parse_detokenize_request(parse_body(req.body), *model_);
           res.set_content(dump({{"prompt", model_->tok->decode(ids, false)}}), "application/json");
         }));

  auto generate = [this](Endpoint ep) {
    return [this, ep](const httplib::Request& req, httplib::Response& res, int64_t& prompt_tokens,
                      int64_t& completion_tokens, bool& streaming) {
      const json b = parse_body(req.body);
      const uint64_t seed = random_u64();
      auto st = std::make_shared<StreamState>();
      st->req = ep == Endpoint::chat ? parse_chat_request(b, *model_, seed) : parse_completion_request(b, *model_, seed);
      prompt_tokens = static_cast<int64_t>(st->req.params.prompt.size());
      engine::Engine& eng = *engine_.load();
      st->handle = eng.submit(st->req.params);  // RequestError -> 400, nothing queued
      st->rb = std::make_unique<ResponseBuilder>(st->req, *model_,
                                                 request_id(ep == Endpoint::chat ? "chatcmpl-" : "cmpl-"), unix_now());
      st->start = st->last_write = Clock::now();
      ++active_;

      if (!st->req.stream) {
        struct Done {
          std::atomic<int64_t>& a;
          ~Done() { --a; }
        } done{active_};
        // Nothing is written until the end, so a client that hangs up meanwhile is noticed on its
        // socket: the sequence is cancelled (its batch slot frees at the next step) and the
        // response, which nobody reads, logged as 499 (client closed request).
        const ClientHangupCheck client(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
        if (!client.found()) log().debug("{}:{}: connection socket not found; no hang-up check", req.remote_addr,
                                         req.remote_port);
        bool client_gone = false;
        engine::RequestOutput last;
        while (!last.finished) {
          for (auto& out : st->handle->wait(kPoll)) {
            st->rb->add(out);
            last = std::move(out);
          }
          if (!last.finished && !client_gone && client.hung_up()) {
            client_gone = true;
            st->handle->cancel();
          }
        }
        completion_tokens = st->rb->completion_tokens();
        if (client_gone) {
          send_error(res, ApiError(499, "the client closed the connection before the response"));
          return;
        }
        if (last.finish_reason == "error") throw ApiError(500, "generation failed: " + last.error);
        res.set_content(dump(st->rb->response()), "application/json");
        return;
      }

      streaming = true;
      res.set_header("Cache-Control", "no-cache");
      const httplib::Request* reqp = &req;
      (void)reqp;
      const std::string method = req.method, path = req.path, addr = req.remote_addr;
      res.set_chunked_content_provider(
          "text/event-stream",
          [st](size_t, httplib::DataSink& sink) {
            auto write = [&](const std::string& s) {
              st->last_write = Clock::now();
              return sink.write(s.data(), s.size());
            };
            auto outs = st->handle->wait(kPoll);
            if (outs.empty()) {
              // Silence: a comment line shows whether the client is still there.
              if (Clock::now() - st->last_write >= kStreamKeepAlive && !write(sse_comment("keep-alive"))) {
                st->handle->cancel();
                return false;
              }
              return true;
            }
            for (const auto& out : outs) {
              if (out.finished && out.finish_reason == "error") {
                write(sse_event(ApiError(500, "generation failed: " + out.error).to_json()));
                write(sse_done());
                st->done = true;
                sink.done();
                return true;
              }
              for (const json& c : st->rb->stream_chunks(out))
                if (!write(sse_event(c))) {
                  st->handle->cancel();  // the client went away
                  return false;
                }
              if (out.finished) {
                if (st->req.include_usage) write(sse_event(st->rb->usage_chunk()));
                write(sse_done());
                st->done = true;
                sink.done();
                return true;
              }
            }
            return true;
          },
          [this, st, method, path, addr](bool) {
            if (!st->done) st->handle->cancel();
            log().info("{} \"{} {}\" 200 prompt_tokens={} completion_tokens={} {:.1f} ms (stream{})", addr, method,
                       path, st->rb->prompt_tokens(), st->rb->completion_tokens(), ms_since(st->start),
                       st->done ? "" : ", client gone");
            --active_;
          });
    };
  };
  s.Post("/v1/completions", json_route(generate(Endpoint::completions)));
  s.Post("/v1/chat/completions", json_route(generate(Endpoint::chat)));
}

}  // namespace fp4lm::server
