#include "engine/image_input.h"

#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "io/json_file.h"
#include "model/layers/mrope_positions.h"
#include "model/vision/gemma3_image_encoder.h"
#include "model/vision/gemma4_image_encoder.h"
#include "vision/gemma3_preprocess.h"
#include "vision/gemma4_preprocess.h"
#include "vision/nemotron_preprocess.h"
#include "vision/nemotron_remote_config.h"
#include "vision/nemotron_tiling.h"
#include "model/vision/nemotron_image_encoder.h"
#include "vision/qwen_vl_preprocess.h"

namespace fp4lm::engine {

namespace {

// config.json's integer `key` (or its alias), `fallback` when absent and fallback >= 0.
int64_t config_int(const nlohmann::json& c, const std::string& path, std::initializer_list<const char*> keys,
                   int64_t fallback = -1) {
  for (const char* k : keys)
    if (c.contains(k) && !c[k].is_null()) {
      if (!c[k].is_number_integer()) fail("{}: field '{}' must be an integer, found {}", path, k, c[k].dump());
      return c[k].get<int64_t>();
    }
  if (fallback >= 0) return fallback;
  fail("{}: the model has a vision tower but no integer '{}'", path, *keys.begin());
}

}  // namespace

std::unique_ptr<ImageInput> ImageInput::for_model(const model::CausalLM& lm, const std::string& dir,
                                                  vision::ImageLimits limits) {
  const model::ImageEncoder* enc = lm.image_encoder();
  if (!enc) return nullptr;
  const std::string cfg_path = (std::filesystem::path(dir) / "config.json").string();
  const nlohmann::json c = io::read_json_file(cfg_path);
  if (enc->family() == model::ImageFamily::gemma3) {
    Gemma3ImageTokens t;
    t.boi = static_cast<int32_t>(config_int(c, cfg_path, {"boi_token_index", "boi_token_id"}, 255999));
    t.eoi = static_cast<int32_t>(config_int(c, cfg_path, {"eoi_token_index", "eoi_token_id"}, 256000));
    t.soft = static_cast<int32_t>(config_int(c, cfg_path, {"image_token_index", "image_token_id"}, 262144));
    t.per_image = config_int(c, cfg_path, {"mm_tokens_per_image"}, 256);
    vision::Gemma3ProcessorConfig proc = vision::read_gemma3_processor_config(dir);
    if (proc.image_seq_length != t.per_image)
      fail("{}: mm_tokens_per_image {} but the processor's image_seq_length {}", cfg_path, t.per_image,
           proc.image_seq_length);
    if (const auto* g = dynamic_cast<const model::Gemma3ImageEncoder*>(enc)) {
      const int64_t s = g->vision_config().image_size;
      if (proc.height != s || proc.width != s || !proc.do_resize)
        fail("{}: the processor resizes images to {}x{} (do_resize {}), but the vision tower takes image_size {}x{}",
             dir, proc.width, proc.height, proc.do_resize, s, s);
    }
    t.tokenizer = tokenizer::Tokenizer::from_dir(dir);
    return std::make_unique<ImageInput>(*enc, std::move(proc), std::move(t), limits);
  }
  if (enc->family() == model::ImageFamily::gemma4) {
    Gemma4ImageTokens t;  // Gemma4Config's defaults
    t.boi = static_cast<int32_t>(config_int(c, cfg_path, {"boi_token_id"}, 255999));
    t.eoi = static_cast<int32_t>(config_int(c, cfg_path, {"eoi_token_id"}, 258882));
    t.soft = static_cast<int32_t>(config_int(c, cfg_path, {"image_token_id"}, 258880));
    vision::Gemma4ProcessorConfig proc = vision::read_gemma4_processor_config(dir);
    if (const auto* g = dynamic_cast<const model::Gemma4ImageEncoder*>(enc)) {
      const model::Gemma4VisionConfig& vc = g->vision_config();
      if (proc.patch_size != vc.patch_size || proc.pooling_kernel_size != vc.pooling_kernel_size)
        fail("{}: the processor's patch_size {} and pooling_kernel_size {}, but the vision tower's (config.json "
             "vision_config) {} and {}",
             dir, proc.patch_size, proc.pooling_kernel_size, vc.patch_size, vc.pooling_kernel_size);
    }
    return std::make_unique<ImageInput>(*enc, std::move(proc), t, limits);
  }
  if (enc->family() == model::ImageFamily::nemotron) {
    NemotronImageTokens t;
    t.image = static_cast<int32_t>(config_int(c, cfg_path, {"image_token_id", "img_context_token_id"}));
    const auto tok = tokenizer::Tokenizer::from_dir(dir);
    for (auto [name, dst] : {std::pair{"<img>", &t.start}, {"</img>", &t.end}}) {
      const std::optional<int32_t> id = tok->token_to_id(name);
      if (!id) fail("{}: the tokenizer has no token '{}' (the Nemotron processor's image tag)", dir, name);
      *dst = *id;
    }
    // The remote-code checkpoints keep the processor's settings in config.json (vLLM's reading).
    vision::NemotronProcessorConfig proc =
        vision::is_nemotron_remote_config(c)
            ? vision::nemotron_remote_processor_config(c, cfg_path, lm.max_model_len(), dir)
            : vision::read_nemotron_processor_config(dir);
    if (const auto* n = dynamic_cast<const model::NemotronImageEncoder*>(enc)) {
      if (proc.patch_size != n->tower().config().patch_size || proc.merge_size() != n->merge_size())
        fail("{}: the processor's patch_size {} and downsample_ratio {}, but the model's vision_config.patch_size {} "
             "and downsample_ratio 1/{}",
             dir, proc.patch_size, proc.downsample_ratio, n->tower().config().patch_size, n->merge_size());
    }
    return std::make_unique<ImageInput>(*enc, std::move(proc), t, limits);
  }
  if (!c.contains("image_token_id") || !c["image_token_id"].is_number_integer())
    fail("{}: the model has a vision tower but no integer 'image_token_id'", cfg_path);
  int64_t merge = 2;
  if (c.contains("vision_config") && c["vision_config"].contains("spatial_merge_size"))
    merge = c["vision_config"]["spatial_merge_size"].get<int64_t>();
  auto proc = vision::read_qwen_vl_processor_config((std::filesystem::path(dir) / "preprocessor_config.json").string());
  if (proc.merge_size != merge)
    fail("{}: vision_config.spatial_merge_size {} but preprocessor_config.json's merge_size {}", cfg_path, merge,
         proc.merge_size);
  auto in = std::make_unique<ImageInput>(*enc, std::move(proc), c["image_token_id"].get<int32_t>(), merge, limits);
  in->setup_video(c, cfg_path, dir);
  return in;
}

void ImageInput::setup_video(const nlohmann::json& c, const std::string& cfg_path, const std::string& dir) {
  // Any problem here refuses videos (naming it) and leaves images as they are.
  const std::string vpath = (std::filesystem::path(dir) / "video_preprocessor_config.json").string();
  if (!std::filesystem::exists(vpath)) {
    video_refusal_ = fmt::format("this model has no video_preprocessor_config.json ({}): fp4lm takes video frames "
                                 "for Qwen3-VL / Qwen3.5 checkpoints with a Qwen3VLVideoProcessor",
                                 dir);
    return;
  }
  try {
    vision::QwenVlVideoConfig v = vision::read_qwen_vl_video_config(vpath);
    if (v.merge_size != merge_ || v.patch_size != qwen_->patch_size || v.temporal_patch_size != qwen_->temporal_patch_size)
      fail("{}: patch_size {}, temporal_patch_size {}, merge_size {}, but the image processor's (the vision tower's) "
           "are {}, {}, {}",
           vpath, v.patch_size, v.temporal_patch_size, v.merge_size, qwen_->patch_size, qwen_->temporal_patch_size,
           merge_);
    for (const char* k : {"video_token_id", "vision_start_token_id", "vision_end_token_id"})
      if (!c.contains(k) || !c[k].is_number_integer())
        fail("{}: the model has a video processor but no integer '{}'", cfg_path, k);
    video_pad_ = c["video_token_id"].get<int32_t>();
    vision_start_ = c["vision_start_token_id"].get<int32_t>();
    vision_end_ = c["vision_end_token_id"].get<int32_t>();
    video_tokenizer_ = tokenizer::Tokenizer::from_dir(dir);
    video_ = std::move(v);
    video_refusal_.clear();
  } catch (const Error& e) {
    video_refusal_ = e.what();
  }
}

ImageInput::ImageInput(const model::ImageEncoder& encoder, vision::QwenVlProcessorConfig processor,
                       int32_t image_pad_id, int64_t merge_size, vision::ImageLimits limits)
    : encoder_(encoder), qwen_(std::move(processor)), pad_(image_pad_id), merge_(merge_size), limits_(limits) {}

ImageInput::ImageInput(const model::ImageEncoder& encoder, vision::Gemma3ProcessorConfig processor,
                       Gemma3ImageTokens tokens, vision::ImageLimits limits)
    : encoder_(encoder), gemma3_(std::move(processor)), g3_(std::move(tokens)), pad_(g3_.boi), limits_(limits) {
  if (!g3_.tokenizer) fail("Gemma 3 image input: no tokenizer for the text around the image tokens");
  // Gemma3Processor's strings around each image (full_image_sequence, replace_image_token).
  nl2_ = g3_.tokenizer->encode("\n\n");
  original_ = g3_.tokenizer->encode("Here is the original image ");
  crops_ = g3_.tokenizer->encode(" and here are some crops to help you see better ");
  space_ = g3_.tokenizer->encode(" ");
}

ImageInput::ImageInput(const model::ImageEncoder& encoder, vision::Gemma4ProcessorConfig processor,
                       Gemma4ImageTokens tokens, vision::ImageLimits limits)
    : encoder_(encoder), gemma4_(std::move(processor)), g4_(tokens), pad_(g4_.soft), limits_(limits) {}

ImageInput::ImageInput(const model::ImageEncoder& encoder, vision::NemotronProcessorConfig processor,
                       NemotronImageTokens tokens, vision::ImageLimits limits)
    : encoder_(encoder), nemotron_(std::move(processor)), nt_(tokens), pad_(nt_.image), limits_(limits) {}

namespace {
// Decoding / preprocessing errors are the request's fault: a RequestError naming the image.
template <typename F>
auto named_errors(const std::string& name, F&& f) {
  try {
    return f();
  } catch (const RequestError&) {
    throw;
  } catch (const Error& e) {
    const std::string what = e.what();
    throw RequestError(what.rfind(name, 0) == 0 ? what : fmt::format("{}: {}", name, what), "image");
  }
}
}  // namespace

EncodedImage ImageInput::encode(std::span<const uint8_t> bytes, const std::string& name,
                                int64_t images_in_call) const {
  return encode(decode(bytes, name), name, images_in_call);
}

vision::RgbImage ImageInput::decode(std::span<const uint8_t> bytes, const std::string& name) const {
  return named_errors(name, [&] { return vision::decode_image(bytes, limits_, name); });
}

EncodedImage ImageInput::encode(const vision::RgbImage& img, const std::string& name, int64_t images_in_call) const {
  return named_errors(name, [&] {
    EncodedImage e;
    if (nemotron_) {
      // The processor's budget for an image of a call with `images_in_call` images.
      const vision::NemotronPixels px = nemotron_->tile_size > 0
                                            ? vision::nemotron_tile_preprocess(img, *nemotron_)
                                            : vision::nemotron_preprocess(img, *nemotron_, images_in_call);
      e.hash = image_content_hash(px);
      e.embeddings = encoder_.encode(px);
      return e;
    }
    if (gemma4_) {
      const vision::Gemma4Pixels px = vision::gemma4_preprocess(img, *gemma4_);
      e.hash = image_content_hash(px);
      e.embeddings = encoder_.encode(px);
      return e;
    }
    if (gemma3_) {
      const vision::Gemma3Pixels px = vision::gemma3_preprocess(img, *gemma3_);
      e.crops = px.num_crops;
      e.hash = image_content_hash(px);
      e.embeddings = encoder_.encode(px);
      return e;
    }
    const vision::QwenVlPixels px = vision::qwen_vl_preprocess(img, *qwen_);
    e.grid = px.grid;
    e.hash = image_content_hash(px);
    e.embeddings = encoder_.encode(px);
    return e;
  });
}

int64_t ImageInput::tokens_for(int64_t height, int64_t width, int64_t images_in_call) const {
  if (nemotron_ && nemotron_->tile_size > 0) {  // <img>, each tile's tokens, </img>
    const int64_t side = nemotron_->tile_size / nemotron_->patch_size, m = nemotron_->merge_size();
    const auto g = vision::nemotron_tile_grid(width, height, nemotron_->tile_size, nemotron_->max_num_tiles);
    return 2 + vision::nemotron_tile_count(g, nemotron_->use_thumbnail) * (side * side / (m * m));
  }
  if (nemotron_)  // <img>, the image tokens, </img>
    return 2 + vision::nemotron_image_tokens(vision::nemotron_grid(height, width, *nemotron_, images_in_call),
                                             *nemotron_);
  if (gemma4_) return 2 + vision::gemma4_image_tokens(height, width, *gemma4_);  // boi, soft tokens, eoi
  if (gemma3_) {
    const auto crops = static_cast<int64_t>(
        vision::gemma3_pan_and_scan(static_cast<int>(height), static_cast<int>(width), *gemma3_).size());
    const auto n = [](const std::vector<int32_t>& v) { return static_cast<int64_t>(v.size()); };
    const int64_t full = 2 * n(nl2_) + 2 + g3_.per_image;
    if (crops == 0) return full;
    return n(original_) + full + n(crops_) + crops * full + (crops - 1) * n(space_);
  }
  return vision::qwen_vl_image_tokens(vision::qwen_vl_grid(height, width, *qwen_), *qwen_);
}

std::vector<int32_t> ImageInput::gemma3_expand(std::span<const int32_t> prompt,
                                               const std::vector<EncodedImage>& images) const {
  std::vector<int32_t> full = nl2_;
  full.push_back(g3_.boi);
  full.insert(full.end(), static_cast<size_t>(g3_.per_image), g3_.soft);
  full.push_back(g3_.eoi);
  full.insert(full.end(), nl2_.begin(), nl2_.end());
  std::vector<int32_t> out;
  std::vector<char> inserted;  // per out token: written by the expansion
  size_t k = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] == g3_.soft)
      throw RequestError(fmt::format("the prompt already holds image soft tokens (id {}) at token {}; an image "
                                     "part is one <start_of_image> (id {}), expanded by fp4lm",
                                     g3_.soft, i, g3_.boi));
    if (prompt[i] != g3_.boi) {
      out.push_back(prompt[i]);
      inserted.push_back(0);
      continue;
    }
    if (k < images.size()) {
      std::vector<int32_t> seq;
      if (images[k].crops == 0) {
        seq = full;
      } else {
        seq = original_;
        seq.insert(seq.end(), full.begin(), full.end());
        seq.insert(seq.end(), crops_.begin(), crops_.end());
        for (int64_t c = 0; c < images[k].crops; ++c) {
          if (c > 0) seq.insert(seq.end(), space_.begin(), space_.end());
          seq.insert(seq.end(), full.begin(), full.end());
        }
      }
      out.insert(out.end(), seq.begin(), seq.end());
      inserted.insert(inserted.end(), seq.size(), 1);
    }
    ++k;
  }
  if (k != images.size())
    throw RequestError(fmt::format("the prompt has {} image placeholder(s) (<start_of_image>, token id {}) for {} "
                                   "image(s); each image needs exactly one (an image content part)",
                                   k, g3_.boi, images.size()));
  // Newline runs the insertion joined (the prompt's "\n" before an image's "\n\n"): tokenized again
  // as one string, as the processor tokenizes the whole text.
  std::map<int32_t, bool> is_nl;
  const auto newline = [&](int32_t id) {
    auto [it, fresh] = is_nl.try_emplace(id, false);
    if (fresh && id != g3_.boi && id != g3_.eoi && id != g3_.soft) {
      const std::string s = g3_.tokenizer->decode({id});
      it->second = !s.empty() && s.find_first_not_of('\n') == std::string::npos;
    }
    return it->second;
  };
  std::vector<int32_t> merged;
  for (size_t i = 0; i < out.size();) {
    size_t j = i;
    bool touches = false;
    while (j < out.size() && newline(out[j])) touches |= inserted[j++] != 0;
    if (j - i >= 2 && touches) {
      std::string run;
      for (size_t t = i; t < j; ++t) run += g3_.tokenizer->decode({out[t]});
      const std::vector<int32_t> ids = g3_.tokenizer->encode(run);
      merged.insert(merged.end(), ids.begin(), ids.end());
    } else {
      merged.insert(merged.end(), out.begin() + static_cast<std::ptrdiff_t>(i), out.begin() + static_cast<std::ptrdiff_t>(j));
    }
    if (j == i) merged.push_back(out[j++]);
    i = j;
  }
  return merged;
}

std::vector<int32_t> ImageInput::gemma4_expand(std::span<const int32_t> prompt,
                                               const std::vector<EncodedImage>& images) const {
  return tagged_expand(prompt, images, g4_.boi, g4_.soft, g4_.eoi, "<|image|>");
}

std::vector<int32_t> ImageInput::tagged_expand(std::span<const int32_t> prompt, const std::vector<EncodedImage>& images,
                                               int32_t begin, int32_t soft, int32_t end, const char* soft_name) const {
  std::vector<int32_t> out;
  size_t k = 0;
  for (int32_t id : prompt) {
    if (id != soft) {
      out.push_back(id);
      continue;
    }
    if (k < images.size()) {
      out.push_back(begin);
      out.insert(out.end(), static_cast<size_t>(images[k].embeddings.rows), soft);
      out.push_back(end);
    }
    ++k;
  }
  if (k != images.size())
    throw RequestError(fmt::format("the prompt has {} image placeholder(s) ({}, token id {}) for {} image(s); "
                                   "each image needs exactly one (an image content part)",
                                   k, soft_name, soft, images.size()));
  return out;
}

void ImageInput::attach(RequestParams& p, std::vector<EncodedImage> images, int64_t max_model_len) const {
  if (gemma4_ || nemotron_) {
    std::vector<int32_t> expanded = nemotron_ ? tagged_expand(p.prompt, images, nt_.start, nt_.image, nt_.end, "<image>")
                                              : gemma4_expand(p.prompt, images);
    int64_t total = static_cast<int64_t>(p.prompt.size()) - static_cast<int64_t>(images.size());
    for (size_t k = 0; k < images.size(); ++k) {
      total += 2 + images[k].embeddings.rows;
      if (max_model_len > 0 && total >= max_model_len)
        throw RequestError(fmt::format("image {} ({} soft tokens) makes the prompt {} tokens, more than the model's "
                                       "context of {} (max_model_len) leaves room for",
                                       k + 1, images[k].embeddings.rows, total, max_model_len),
                           "image");
    }
    p.images = nemotron_ ? make_nemotron_prompt_images(expanded, nt_.image, std::move(images), encoder_.hidden_size())
                         : make_gemma4_prompt_images(expanded, g4_.soft, std::move(images), encoder_.hidden_size());
    p.prompt = std::move(expanded);
    return;
  }
  if (gemma3_) {
    std::vector<int32_t> expanded = gemma3_expand(p.prompt, images);
    if (max_model_len > 0 && static_cast<int64_t>(expanded.size()) >= max_model_len) {
      // Name the first image whose tokens (as tokens_for counts them) cross the context.
      int64_t total = static_cast<int64_t>(p.prompt.size()) - static_cast<int64_t>(images.size());
      size_t k = 0;
      for (; k + 1 < images.size(); ++k) {
        total += static_cast<int64_t>(images[k].embeddings.rows) + 2 + 4 * static_cast<int64_t>(nl2_.size());
        if (total >= max_model_len) break;
      }
      throw RequestError(fmt::format("image {} ({} image tokens in {} block(s)) makes the prompt {} tokens, more than "
                                     "the model's context of {} (max_model_len) leaves room for",
                                     k + 1, images[k].embeddings.rows, 1 + images[k].crops, expanded.size(),
                                     max_model_len),
                         "image");
    }
    p.images = make_gemma3_prompt_images(expanded, g3_.soft, std::move(images), g3_.per_image, encoder_.hidden_size());
    p.prompt = std::move(expanded);
    return;
  }
  std::vector<int64_t> counts;
  int64_t total = static_cast<int64_t>(p.prompt.size()) - static_cast<int64_t>(images.size());
  for (size_t k = 0; k < images.size(); ++k) {
    counts.push_back(model::image_run_tokens(images[k].grid, merge_));
    total += counts.back();
    if (max_model_len > 0 && total >= max_model_len)
      throw RequestError(fmt::format("image {} ({} tokens for its {}x{} patch grid) makes the prompt {} tokens, more "
                                     "than the model's context of {} (max_model_len) leaves room for",
                                     k + 1, counts.back(), images[k].grid.h, images[k].grid.w, total, max_model_len),
                         "image");
  }
  p.prompt = expand_image_placeholders(p.prompt, pad_, counts);
  p.images = make_prompt_images(p.prompt, pad_, std::move(images), merge_, encoder_.hidden_size());
}

EncodedImage ImageInput::encode_video(const std::vector<vision::RgbImage>& frames, const std::string& name) const {
  if (!video_) throw RequestError(fmt::format("{}: {}", name, video_refusal_), "video");
  return named_errors(name, [&] {
    EncodedImage e;
    const vision::QwenVlPixels px = vision::qwen_vl_video_preprocess(frames, *video_);
    e.grid = px.grid;
    e.frames = static_cast<int64_t>(frames.size());
    // Another seed than an image's: a still image and a video of the same pixels are different rows.
    e.hash = image_content_hash(px) ^ 0x766964656full;
    e.embeddings = encoder_.encode(px);
    return e;
  });
}

int64_t ImageInput::tokens_for_video(int64_t frames, int64_t height, int64_t width) const {
  if (!video_) throw RequestError(video_refusal_, "video");
  const vision::GridThw g = vision::qwen_vl_video_grid(frames, height, width, *video_);
  int64_t n = 0;
  for (const std::string& ts : vision::qwen3_vl_video_timestamps(frames, video_->temporal_patch_size))
    n += static_cast<int64_t>(video_tokenizer_->encode(ts, /*add_special_tokens=*/false).size()) + 2;
  return n + g.t * (g.h / merge_) * (g.w / merge_) - 1;  // less the placeholder it replaces
}

void ImageInput::check_videos_fit(int64_t prompt_tokens, const std::vector<std::array<int64_t, 3>>& videos,
                                  int64_t max_model_len) const {
  if (!video_) throw RequestError(video_refusal_, "video");
  int64_t total = prompt_tokens;
  for (size_t k = 0; k < videos.size(); ++k) {
    const auto [frames, h, w] = videos[k];
    const int64_t n = named_errors(fmt::format("video {}", k + 1), [&] { return tokens_for_video(frames, h, w); });
    total += n;
    if (max_model_len > 0 && total >= max_model_len) {
      const vision::GridThw g = vision::qwen_vl_video_grid(frames, h, w, *video_);
      throw RequestError(fmt::format("video {} ({} frames, {} tokens per frame group) makes the prompt {} tokens, "
                                     "more than the model's context of {} (max_model_len) leaves room for",
                                     k + 1, frames, (g.h / merge_) * (g.w / merge_), total, max_model_len),
                         "video");
    }
  }
}

std::vector<int32_t> ImageInput::expand_videos(std::span<const int32_t> prompt,
                                               const std::vector<EncodedImage>& videos) const {
  std::vector<int32_t> out;
  size_t k = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] != video_pad_) {
      out.push_back(prompt[i]);
      continue;
    }
    if (i + 1 < prompt.size() && prompt[i + 1] == video_pad_)
      throw RequestError(fmt::format("the prompt already holds a run of video placeholder tokens (id {}) at token {}; "
                                     "a video part is one placeholder, expanded by fp4lm",
                                     video_pad_, i));
    if (k < videos.size()) {
      const EncodedImage& v = videos[k];
      const int64_t per_group = (v.grid.h / merge_) * (v.grid.w / merge_);
      const auto stamps = vision::qwen3_vl_video_timestamps(v.frames, video_->temporal_patch_size);
      if (static_cast<int64_t>(stamps.size()) != v.grid.t)
        throw RequestError(fmt::format("video {}: {} frames make {} timestamps, but its grid has t {}", k + 1,
                                       v.frames, stamps.size(), v.grid.t));
      for (const std::string& ts : stamps) {
        const std::vector<int32_t> ids = video_tokenizer_->encode(ts, /*add_special_tokens=*/false);
        out.insert(out.end(), ids.begin(), ids.end());
        out.push_back(vision_start_);
        out.insert(out.end(), static_cast<size_t>(per_group), video_pad_);
        out.push_back(vision_end_);
      }
    }
    ++k;
  }
  if (k != videos.size())
    throw RequestError(fmt::format("the prompt has {} video placeholder(s) (token id {}) for {} video(s); each video "
                                   "needs exactly one (a video content part or <|vision_start|><|video_pad|>"
                                   "<|vision_end|> in a raw prompt)",
                                   k, video_pad_, videos.size()));
  return out;
}

void ImageInput::attach(RequestParams& p, std::vector<EncodedImage> images, std::vector<EncodedImage> videos,
                        int64_t max_model_len) const {
  if (videos.empty()) return attach(p, std::move(images), max_model_len);
  if (!video_) throw RequestError(video_refusal_, "video");
  // Videos first (their placeholders are not image pads), then the images as attach checks them.
  std::vector<int32_t> expanded = expand_videos(p.prompt, videos);
  std::vector<int64_t> counts;
  int64_t total = static_cast<int64_t>(expanded.size()) - static_cast<int64_t>(images.size());
  if (max_model_len > 0 && total >= max_model_len) {
    int64_t before = static_cast<int64_t>(p.prompt.size()) - static_cast<int64_t>(images.size());
    size_t k = 0;
    for (; k + 1 < videos.size(); ++k) {
      before += tokens_for_video(videos[k].frames, videos[k].grid.h * qwen_->patch_size,
                                 videos[k].grid.w * qwen_->patch_size);
      if (before >= max_model_len) break;
    }
    throw RequestError(fmt::format("video {} ({} frames, {} tokens per frame group) makes the prompt {} tokens, more "
                                   "than the model's context of {} (max_model_len) leaves room for",
                                   k + 1, videos[k].frames, (videos[k].grid.h / merge_) * (videos[k].grid.w / merge_),
                                   total, max_model_len),
                       "video");
  }
  for (size_t k = 0; k < images.size(); ++k) {
    counts.push_back(model::image_run_tokens(images[k].grid, merge_));
    total += counts.back();
    if (max_model_len > 0 && total >= max_model_len)
      throw RequestError(fmt::format("image {} ({} tokens for its {}x{} patch grid) makes the prompt {} tokens, more "
                                     "than the model's context of {} (max_model_len) leaves room for",
                                     k + 1, counts.back(), images[k].grid.h, images[k].grid.w, total, max_model_len),
                         "image");
  }
  p.prompt = expand_image_placeholders(expanded, pad_, counts);
  p.images = make_qwen_prompt_media(p.prompt, pad_, std::move(images), video_pad_, std::move(videos), merge_,
                                    encoder_.hidden_size());
}

void refuse_images(const std::string& model_name) {
  throw RequestError(fmt::format("model '{}' has no vision tower fp4lm runs: it does not accept image inputs",
                                 model_name),
                     "messages");
}

}  // namespace fp4lm::engine
