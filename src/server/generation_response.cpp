#include "server/generation_response.h"

#include "core/log.h"
#include "server/api_error.h"
#include "server/sse.h"

namespace fp4lm::server {

using nlohmann::json;

namespace {

constexpr auto kKeepAliveTick = std::chrono::milliseconds(250);
constexpr auto kStreamKeepAlive = std::chrono::milliseconds(1000);

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

GenerationResponse::GenerationResponse(std::shared_ptr<Exchange> ex, ApiRequest req, const ServingModel& m,
                                       std::string id, int64_t created,
                                       std::vector<std::shared_ptr<engine::RequestHandle>> handles, HeaderFields fields,
                                       std::function<void()> on_end)
    : ex_(std::move(ex)), req_(std::move(req)), handles_(std::move(handles)), done_(handles_.size(), false),
      open_(handles_.size()), fields_(std::move(fields)), on_end_(std::move(on_end)), start_(Clock::now()),
      last_write_(start_) {
  rb_ = std::make_unique<ResponseBuilder>(req_, m, std::move(id), created);
}

void GenerationResponse::start() {
  ex_->post([self = shared_from_this()] { self->begin(); });
}

void GenerationResponse::begin() {
  std::weak_ptr<GenerationResponse> weak = shared_from_this();
  ex_->on_gone([weak] {
    if (auto self = weak.lock()) self->client_gone();
  });
  if (req_.stream) {
    HttpResponse head;
    head.content_type = "text/event-stream";
    head.headers = fields_;
    head.headers.emplace_back("Cache-Control", "no-cache");
    ex_->start_stream(std::move(head));
    ex_->after(kKeepAliveTick, [weak] {
      if (auto self = weak.lock()) self->keep_alive_tick();
    });
  }
  // The engine thread only schedules a drain; every output is handled here, on the event loop.
  // The listener owns this answer until finish() removes it (the engine always ends a request).
  for (auto& h : handles_) h->set_listener([self = shared_from_this()] { self->schedule_drain(); });
}

void GenerationResponse::schedule_drain() {
  if (drain_scheduled_.exchange(true)) return;
  ex_->post([self = shared_from_this()] {
    self->drain_scheduled_ = false;
    self->drain();
  });
}

void GenerationResponse::drain() {
  for (size_t c = 0; c < handles_.size() && !ended_; ++c) {
    if (done_[c]) continue;
    for (auto& out : handles_[c]->wait(std::chrono::milliseconds(0))) {
      if (req_.stream) {
        if (!stream_output(c, out)) return;
      } else {
        if (out.finished && out.finish_reason == "error") return finish(out);
        rb_->add(c, out);
      }
      if (out.finished) {
        done_[c] = true;
        if (--open_ == 0) return finish(out);
        break;
      }
    }
  }
}

// Writes one output's events; false when the output was an error (the answer has ended).
bool GenerationResponse::stream_output(size_t c, const engine::RequestOutput& out) {
  if (out.finished && out.finish_reason == "error") {
    ex_->write(sse_event(ApiError(500, "generation failed: " + out.error).to_json()));
    finish(out);
    return false;
  }
  const auto chunks = rb_->stream_chunks(c, out);
  for (const json& c : chunks) ex_->write(sse_event(c));
  if (!chunks.empty()) last_write_ = Clock::now();
  return true;
}

void GenerationResponse::finish(const engine::RequestOutput& last) {
  if (ended_) return;
  ended_ = true;
  for (auto& h : handles_) h->set_listener(nullptr);
  if (open_ > 0) cancel_all();  // an error ended the answer early: the other choices stop too
  if (req_.stream) {
    if (last.finish_reason != "error" && req_.include_usage) ex_->write(sse_event(rb_->usage_chunk()));
    ex_->write(sse_done());
    ex_->end_stream();
    log_end(200, client_gone_ ? ", client gone" : "");
  } else if (client_gone_) {
    log_end(499, "");
  } else if (last.finish_reason == "error") {
    HttpResponse r{500, "application/json", fields_, dump(ApiError(500, "generation failed: " + last.error).to_json())};
    ex_->respond(std::move(r));
    log_end(500, "");
  } else {
    ex_->respond(HttpResponse{200, "application/json", fields_, dump(rb_->response())});
    log_end(200, "");
  }
  if (auto fn = std::move(on_end_)) fn();
}

void GenerationResponse::keep_alive_tick() {
  if (ended_) return;
  if (Clock::now() - last_write_ >= kStreamKeepAlive) {
    ex_->write(sse_comment("keep-alive"));
    last_write_ = Clock::now();
  }
  std::weak_ptr<GenerationResponse> weak = shared_from_this();
  ex_->after(kKeepAliveTick, [weak] {
    if (auto self = weak.lock()) self->keep_alive_tick();
  });
}

// The client is gone: the sequence stops at the next step; its last output ("abort") ends us.
void GenerationResponse::client_gone() {
  if (ended_) return;
  client_gone_ = true;
  cancel_all();
}

void GenerationResponse::cancel_all() {
  for (auto& h : handles_) h->cancel();
}

void GenerationResponse::log_end(int status, const char* note) const {
  const HttpRequest& r = ex_->request();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  log().info("{} \"{} {}\" {} prompt_tokens={} completion_tokens={} {:.1f} ms{}{}{}", r.remote_addr,
             log_escape(r.method), log_escape(r.path), status, rb_->prompt_tokens(), rb_->completion_tokens(), ms,
             req_.stream ? " (stream" : "", note, req_.stream ? ")" : "");
}

}  // namespace fp4lm::server
