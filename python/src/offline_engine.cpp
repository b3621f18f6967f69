#include "offline_engine.h"

#include <chrono>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/request_error.h"
#include "io/json_file.h"

namespace py = pybind11;

namespace fp4lm::python {

OfflineEngine::OfflineEngine(const OfflineOptions& o) : dir_(o.model) {
  const engine::EngineConfig cfg = engine::create_engine_config(o.engine);
  py::gil_scoped_release nogil;
  text_ = engine::TextFront::open(o.tokenizer.empty() ? dir_ : o.tokenizer);
  runtime_.emplace(engine::Runtime::open(dir_, cfg));
  engine_ = std::make_unique<engine::Engine>(*runtime_, text_.tokenizer.get(), cfg.scheduler);
}

OfflineEngine::~OfflineEngine() {
  // The engine thread may be logging (which takes the GIL) while it is joined.
  std::unique_ptr<engine::Engine> e = std::move(engine_);
  if (PyGILState_Check()) {
    py::gil_scoped_release nogil;
    e.reset();
  }
}

const tokenizer::Tokenizer& OfflineEngine::tokenizer() const {
  if (!text_.tokenizer) fail("{}: no tokenizer.json, so text cannot be encoded or decoded; give prompt_token_ids", dir_);
  return *text_.tokenizer;
}

std::string OfflineEngine::apply_chat_template(const std::string& messages_json, bool add_generation_prompt,
                                               std::optional<bool> enable_thinking, const std::string& tools_json,
                                               const std::string& extra_json) const {
  tokenizer();  // a chat needs the tokenizer too
  if (!text_.chat) fail("{}", text_.chat_error);
  tokenizer::ChatOptions co;
  co.add_generation_prompt = add_generation_prompt;
  co.enable_thinking = enable_thinking;
  co.extra = io::parse_json(extra_json, "chat_template_kwargs");
  return text_.chat->render_ordered(io::parse_ordered_json(messages_json, "chat messages"),
                               io::parse_ordered_json(tools_json, "tools"), co);
}

ImagePrompt OfflineEngine::attach_images(std::vector<int32_t> prompt, const std::vector<NamedImage>& images,
                                         const std::string& model_name, const std::vector<NamedVideo>& videos) {
  py::gil_scoped_release nogil;  // the vision tower runs here
  std::call_once(image_input_once_, [this] { image_input_ = engine::ImageInput::for_model(runtime_->model(), dir_); });
  engine::RequestParams p;
  p.prompt = std::move(prompt);
  if (!image_input_) {
    if (images.empty() && videos.empty()) return {std::move(p.prompt), nullptr};
    engine::refuse_images(model_name);
  }
  std::vector<engine::EncodedImage> encoded_videos;
  if (!videos.empty() && !image_input_->video_refusal().empty())
    throw engine::RequestError(fmt::format("{}: model '{}' takes no video: {}", videos[0].name, model_name,
                                           image_input_->video_refusal()),
                               "video");
  std::vector<std::vector<vision::RgbImage>> decoded;
  for (const NamedVideo& v : videos) {
    std::vector<vision::RgbImage> frames;
    frames.reserve(v.frames.size());
    for (const NamedImage& f : v.frames) {
      if (f.width <= 0) {
        frames.push_back(image_input_->decode({reinterpret_cast<const uint8_t*>(f.bytes.data()), f.bytes.size()}, f.name));
        continue;
      }
      if (f.bytes.size() != static_cast<size_t>(f.width) * static_cast<size_t>(f.height) * 3)
        throw engine::RequestError(fmt::format("{}: {} bytes, but a {}x{} RGB frame has {}", f.name, f.bytes.size(),
                                               f.width, f.height, static_cast<size_t>(f.width) * f.height * 3),
                                   "video");
      frames.push_back({f.width, f.height, std::vector<uint8_t>(f.bytes.begin(), f.bytes.end())});
    }
    decoded.push_back(std::move(frames));
  }
  // Every video's token count before the tower runs: an over-long one costs no encoding.
  std::vector<std::array<int64_t, 3>> sizes;
  for (size_t k = 0; k < decoded.size(); ++k) {
    if (decoded[k].empty()) throw engine::RequestError(fmt::format("{}: a video of no frames", videos[k].name), "video");
    sizes.push_back({static_cast<int64_t>(decoded[k].size()), decoded[k][0].height, decoded[k][0].width});
  }
  if (!decoded.empty())
    image_input_->check_videos_fit(static_cast<int64_t>(p.prompt.size()) - static_cast<int64_t>(images.size()), sizes,
                                   runtime_->model().max_model_len());
  for (size_t k = 0; k < decoded.size(); ++k) encoded_videos.push_back(image_input_->encode_video(decoded[k], videos[k].name));
  std::vector<engine::EncodedImage> encoded;
  encoded.reserve(images.size());
  for (const NamedImage& im : images) {
    const auto* data = reinterpret_cast<const uint8_t*>(im.bytes.data());
    encoded.push_back(image_input_->encode({data, im.bytes.size()}, im.name, static_cast<int64_t>(images.size())));
  }
  image_input_->attach(p, std::move(encoded), std::move(encoded_videos), runtime_->model().max_model_len());
  return {std::move(p.prompt), std::move(p.images)};
}

void OfflineEngine::check_accepts_images(const std::string& model_name) const {
  if (runtime_->diffusion() || !runtime_->model().image_encoder()) engine::refuse_images(model_name);
}

std::vector<std::vector<engine::BeamSequence>> OfflineEngine::beam_search(
    const std::vector<std::vector<int32_t>>& prompts, const engine::BeamSearchParams& p) {
  if (runtime_->diffusion())
    throw engine::RequestError("DiffusionGemma does not support beam search (a block's tokens are not drawn one by one)",
                               "beam_search");
  const engine::RequestLimits limits{runtime_->model().vocab_size(), runtime_->model().max_model_len()};
  for (const auto& prompt : prompts) {
    if (prompt.empty()) throw engine::RequestError("a prompt is empty", "prompts");
    engine::validate_beam_search(p, limits, prompt.size());
  }
  const engine::SubmitFn submit = [this](engine::RequestParams r) { return engine_->submit(std::move(r)); };
  bool interrupted = false;
  auto cancelled = [&interrupted] {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) interrupted = true;
    return interrupted;
  };
  std::vector<std::vector<engine::BeamSequence>> out;
  try {
    py::gil_scoped_release nogil;
    for (const auto& prompt : prompts) out.push_back(engine::beam_search(submit, prompt, p, runtime_->model().eos_ids(), cancelled));
  } catch (const Error&) {
    if (interrupted) throw py::error_already_set();  // the KeyboardInterrupt PyErr_CheckSignals set
    throw;
  }
  return out;
}

std::vector<OfflineResult> OfflineEngine::generate(std::vector<engine::RequestParams> requests,
                                                   py::object on_progress) {
  const size_t n = requests.size();
  std::vector<OfflineResult> results(n);
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  handles.reserve(n);
  auto cancel_and_drain = [&] {
    py::gil_scoped_release nogil;
    for (auto& h : handles)
      if (!h->finished()) h->cancel();
    for (auto& h : handles)
      while (!h->finished()) h->wait(std::chrono::milliseconds(50));
  };
  try {
    py::gil_scoped_release nogil;  // the engine thread may be logging (GIL) while holding its lock
    for (auto& r : requests) handles.push_back(engine_->submit(std::move(r)));
  } catch (...) {
    cancel_and_drain();  // the engine must not keep working for a call that failed
    throw;
  }

  size_t finished = 0;
  std::string error;
  while (finished < n) {
    size_t now_finished = 0;
    {
      py::gil_scoped_release nogil;
      bool waited = false;
      for (size_t i = 0; i < n; ++i) {
        auto& h = handles[i];
        if (!results[i].finish_reason.empty()) {
          ++now_finished;
          continue;
        }
        // Block (briefly, so signals are seen) on the first unfinished request; poll the rest.
        auto outs = h->wait(std::chrono::milliseconds(waited ? 0 : 100));
        waited = true;
        for (auto& out : outs) {
          OfflineResult& r = results[i];
          r.token_ids.insert(r.token_ids.end(), out.token_ids.begin(), out.token_ids.end());
          r.text += out.text;
          for (auto& lp : out.logprobs) r.logprobs.push_back(std::move(lp));
          if (!out.prompt_logprobs.empty()) r.prompt_logprobs = std::move(out.prompt_logprobs);
          if (out.finished) {
            r.finish_reason = out.finish_reason;
            r.stop_reason = out.stop_reason;
            r.stop_token = out.stop_token;
            if (out.finish_reason == "error" && error.empty()) error = out.error;
          }
        }
        if (!results[i].finish_reason.empty()) ++now_finished;
      }
    }
    try {
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();  // KeyboardInterrupt, usually
      if (now_finished != finished && !on_progress.is_none()) on_progress(now_finished);
    } catch (...) {
      cancel_and_drain();  // leave the engine idle and usable for the next call
      throw;
    }
    finished = now_finished;
  }
  if (!error.empty()) throw Error(error);
  return results;
}

}  // namespace fp4lm::python
