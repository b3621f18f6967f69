#pragma once
// What fp4lm.LLM holds: a loaded checkpoint, its tokenizer and chat template (either may be
// absent), and the continuous-batching engine (engine/engine.h) over it. generate() submits
// every request at once and waits for all of them with the GIL released, checking for Python
// signals between waits so Ctrl-C cancels the batch and leaves the engine usable.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "engine/beam_search.h"
#include "engine/engine.h"
#include "engine/engine_args.h"
#include "engine/image_input.h"
#include "engine/runtime.h"
#include "engine/sampling_defaults.h"
#include "model/causal_lm.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::python {

struct OfflineOptions {
  std::string model;
  std::string tokenizer;  // the tokenizer's directory; "" = the model's
  engine::EngineArgs engine;  // engine/engine_args.h's create_engine_config, as the CLI's flags
};

// One request's whole result.
struct OfflineResult {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<engine::TokenLogprob> logprobs;
  std::vector<engine::TokenLogprob> prompt_logprobs;  // prompt_logprobs: the prompt's tokens after the first
  std::string finish_reason;
  std::optional<std::string> stop_reason;
  std::optional<int32_t> stop_token;
};

// A prompt with its images attached (engine/image_input.h): the placeholders expanded to the
// images' token counts, and the encoder rows every sample of the prompt shares.
struct ImagePrompt {
  std::vector<int32_t> prompt;
  std::shared_ptr<const engine::PromptImages> images;  // null: no images
};

// One image as the Python side hands it over: what errors call it, and its encoded file bytes
// (or, with width > 0, its pixels as height x width x 3 RGB bytes: a video frame from numpy).
struct NamedImage {
  std::string name;
  std::string bytes;
  int width = 0, height = 0;
};

// One video given as frames (Qwen3-VL): what errors call it, and its frames in order.
struct NamedVideo {
  std::string name;
  std::vector<NamedImage> frames;
};

class OfflineEngine {
 public:
  // Loads with the GIL released. UsageError for bad option values, Error for bad checkpoints.
  explicit OfflineEngine(const OfflineOptions& o);
  ~OfflineEngine();

  // Runs every request through the engine at once; results in input order. `on_progress(k)`
  // (may be None) is called with the GIL held each time the number of finished requests grows.
  std::vector<OfflineResult> generate(std::vector<engine::RequestParams> requests, pybind11::object on_progress);

  // engine::beam_search of each prompt, its steps through the engine (GIL released; Ctrl-C
  // aborts it and raises KeyboardInterrupt). RequestError for impossible parameters.
  std::vector<std::vector<engine::BeamSequence>> beam_search(const std::vector<std::vector<int32_t>>& prompts,
                                                             const engine::BeamSearchParams& p);

  // Decodes, preprocesses and encodes `images` with the model's vision tower and expands the
  // prompt's placeholders (one <|image_pad|> per image), the GIL released. RequestError
  // (ValueError) naming `model_name` when the model has no vision tower (unless there are no
  // images), naming the image when it does not decode, and for a placeholder count other than the
  // images' or a prompt the images make longer than max_model_len.
  // `videos`: each video's frames, decoded and encoded as ImageInput::encode_video (its
  // <|video_pad|> expanded with the processor's timestamps); RequestError naming the video when the
  // model takes none (ImageInput::video_refusal) or a frame does not decode.
  ImagePrompt attach_images(std::vector<int32_t> prompt, const std::vector<NamedImage>& images,
                            const std::string& model_name, const std::vector<NamedVideo>& videos = {});

  // engine::refuse_images(model_name) when the model has no vision tower (checked before a chat
  // template renders image parts).
  void check_accepts_images(const std::string& model_name) const;

  bool has_tokenizer() const { return text_.tokenizer != nullptr; }
  const tokenizer::Tokenizer& tokenizer() const;  // Error when the checkpoint has none
  // messages_json: a JSON array of messages; tools_json: "null" or a JSON array of tools;
  // extra_json: a JSON object of more template variables. Error when the checkpoint has no chat
  // template.
  std::string apply_chat_template(const std::string& messages_json, bool add_generation_prompt,
                                  std::optional<bool> enable_thinking, const std::string& tools_json,
                                  const std::string& extra_json) const;
  int64_t max_model_len() const { return runtime_->max_model_len(); }
  int64_t vocab_size() const { return runtime_->vocab_size(); }
  // A DiffusionGemma's canvas_length (0: a token-by-token model): max_tokens=None takes whole canvases.
  int64_t canvas_length() const { return runtime_->diffusion() ? runtime_->diffusion()->config().canvas_length : 0; }
  std::vector<int64_t> eos_ids() const { return runtime_->eos_ids(); }
  // generation_config.json's request defaults, from the checkpoint the engine loaded (as the server).
  engine::SamplingDefaults sampling_defaults() const {
    return engine::sampling_defaults_from(runtime_->generation_config());
  }

 private:
  std::string dir_;
  engine::TextFront text_;
  std::optional<engine::Runtime> runtime_;  // set by the constructor
  std::unique_ptr<engine::Engine> engine_;
  // Made on the first image (a VL checkpoint runs text without a preprocessor_config.json).
  std::unique_ptr<engine::ImageInput> image_input_;
  std::once_flag image_input_once_;
};

}  // namespace fp4lm::python
