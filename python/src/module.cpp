// fp4lm._core: the C++ side of the fp4lm Python package (python/fp4lm). The public API (LLM,
// SamplingParams, outputs) is written in Python over these few entry points.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "core/error.h"
#include "engine/best_of.h"
#include "engine/media_url.h"
#include "engine/mm_limits.h"
#include "engine/request.h"
#include "engine/sampling_defaults.h"
#include "io/model_source.h"
#include "offline_engine.h"
#include "python_log_sink.h"
#include "vision/image_decode.h"

namespace py = pybind11;
using namespace fp4lm;

namespace {

// The request fields LLM.generate sends (already checked by SamplingParams).
engine::RequestParams request_from(const py::dict& d) {
  engine::RequestParams p;
  p.prompt = d["prompt_token_ids"].cast<std::vector<int32_t>>();
  // Engine.attach_images' result: the prompt is its expanded one (LLM._request took it from there).
  if (d.contains("images") && !d["images"].is_none()) p.images = d["images"].cast<const python::ImagePrompt&>().images;
  p.max_tokens = d["max_tokens"].cast<int64_t>();
  p.min_tokens = d["min_tokens"].cast<int64_t>();
  p.sampling.temperature = d["temperature"].cast<double>();
  p.sampling.top_k = d["top_k"].cast<int64_t>();
  p.sampling.top_p = d["top_p"].cast<double>();
  p.sampling.min_p = d["min_p"].cast<double>();
  p.sampling.seed = d["seed"].cast<uint64_t>();
  p.stop = d["stop"].cast<std::vector<std::string>>();
  p.stop_token_ids = d["stop_token_ids"].cast<std::vector<int32_t>>();
  p.ignore_eos = d["ignore_eos"].cast<bool>();
  p.presence_penalty = d["presence_penalty"].cast<double>();
  p.frequency_penalty = d["frequency_penalty"].cast<double>();
  p.repetition_penalty = d["repetition_penalty"].cast<double>();
  p.logprobs = d["logprobs"].cast<int64_t>();
  p.prompt_logprobs = d["prompt_logprobs"].cast<int64_t>();
  p.skip_special_tokens = d["skip_special_tokens"].cast<bool>();
  p.logit_bias = d["logit_bias"].cast<std::vector<std::pair<int32_t, float>>>();
  // structured_outputs, as SamplingParams checked it: (kind, text, choices).
  const auto [kind, text, choices] = d["structured"].cast<std::tuple<std::string, std::string, std::vector<std::string>>>();
  using Kind = engine::structured::StructuredSpec::Kind;
  auto& st = p.structured;
  st.text = text;
  st.choices = choices;
  st.param = "structured_outputs." + kind;
  if (kind == "json") st.kind = Kind::JsonSchema;
  else if (kind == "json_object") st.kind = Kind::JsonObject;
  else if (kind == "regex") st.kind = Kind::Regex;
  else if (kind == "choice") st.kind = Kind::Choice;
  else if (kind == "grammar") st.kind = Kind::Grammar;
  return p;
}

py::dict result_to_dict(const python::OfflineResult& r) {
  py::dict d;
  d["token_ids"] = r.token_ids;
  d["text"] = py::bytes(r.text).attr("decode")("utf-8", "replace");
  py::list lps;
  for (const auto& lp : r.logprobs) lps.append(py::make_tuple(lp.id, lp.logprob, lp.top));
  d["logprobs"] = lps;
  py::list plps;
  for (const auto& lp : r.prompt_logprobs) plps.append(py::make_tuple(lp.id, lp.logprob, lp.rank, lp.top));
  d["prompt_logprobs"] = plps;
  d["finish_reason"] = r.finish_reason;
  if (r.stop_reason) d["stop_reason"] = *r.stop_reason;
  else if (r.stop_token) d["stop_reason"] = *r.stop_token;
  else d["stop_reason"] = py::none();
  return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "fp4lm's C++ engine (use the fp4lm package, not this module)";
  m.attr("__version__") = FP4LM_VERSION;
  // The largest encoded image the decoder takes (fp4lm._images reads no more of a file).
  m.attr("max_image_bytes") = vision::ImageLimits{}.max_bytes;

  // The engine's image-URL rules and limit_mm_per_prompt, the ones `fp4lm serve` applies
  // (engine/media_url.h, engine/mm_limits.h), with the settings named as LLM's arguments.
  m.def(
      "load_media_url",
      [](const std::string& url, const std::string& name, const std::string& allowed_local_media_path,
         const std::vector<std::string>& allowed_media_domains) {
        engine::MediaUrlOptions o;
        o.allowed_local_media_path = allowed_local_media_path;
        o.allowed_media_domains = allowed_media_domains;
        o.local_path_option = "allowed_local_media_path";
        o.domains_option = "allowed_media_domains";
        std::vector<uint8_t> bytes;
        {
          py::gil_scoped_release nogil;  // a remote fetch may take seconds
          bytes = engine::load_media_url(url, o, name);
        }
        return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      },
      py::arg("url"), py::arg("name"), py::arg("allowed_local_media_path"), py::arg("allowed_media_domains"));
  // n / best_of as the server applies them (engine/best_of.h).
  m.def("best_of_order", &engine::best_of_order, py::arg("cumulative_logprobs"), py::arg("n"));
  m.def("sample_seed", &engine::sample_seed, py::arg("seed"), py::arg("index"));
  m.def("canonical_media_dir", &engine::canonical_media_dir, py::arg("dir"), py::arg("option"));
  m.def("media_domains", &engine::media_domains, py::arg("entries"), py::arg("option"));
  m.def("image_limit", py::overload_cast<const std::string&, const std::string&, bool>(&engine::image_limit),
        py::arg("json_text"), py::arg("option"), py::arg("videos_taken") = false);
  m.def("video_limit", &engine::video_limit, py::arg("json_text"), py::arg("option"));

  // One-line messages, as the CLI prints them: bad values -> ValueError, the rest RuntimeError.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const UsageError& e) {  // RequestError (a bad request parameter) included
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  python::install_python_log_sink();

  // LLM(model=...): a directory, or a Hugging Face Hub id found in (or downloaded into) the shared
  // Hub cache (io/model_source.h). Returns (directory, where the files came from). Without the GIL:
  // the download threads log through Python.
  m.def(
      "resolve_model",
      [](const std::string& model, const std::string& revision, const std::string& download_dir, bool tokenizer_only) {
        io::ModelSourceOptions o;
        o.revision = revision;
        o.download_dir = download_dir;
        if (tokenizer_only) o.need = io::hub::Need::tokenizer_only;
        const io::ModelSource s = io::resolve_model_source(model, o);
        return std::make_pair(s.dir, s.origin);
      },
      py::arg("model"), py::arg("revision") = "", py::arg("download_dir") = "", py::arg("tokenizer_only") = false,
      py::call_guard<py::gil_scoped_release>());

  // A prompt with its images encoded (Engine.attach_images): opaque to Python but for the
  // expanded prompt ids; a request dict carries it as "images".
  py::class_<python::ImagePrompt>(m, "ImagePrompt")
      .def_property_readonly("prompt_token_ids", [](const python::ImagePrompt& p) { return p.prompt; })
      .def_property_readonly("num_images",
                             [](const python::ImagePrompt& p) { return p.images ? p.images->count : int64_t{0}; });

  py::class_<python::OfflineEngine>(m, "Engine")
      .def(py::init([](const std::string& model, const std::string& dtype, const std::string& override_dtype,
                       const std::string& kv_cache_dtype,
                       int64_t max_model_len, const std::string& linear_backend, const std::string& moe_backend,
                       int64_t a16_max_tokens, int threads, int64_t max_num_seqs, int64_t max_num_batched_tokens,
                       size_t kv_cache_memory_bytes, bool enable_prefix_caching, int64_t block_size,
                       const std::string& speculative_config, const std::string& activation_scale,
                       const std::string& tokenizer) {
             python::OfflineOptions o;
             o.model = model;
             o.tokenizer = tokenizer;
             o.engine.dtype = dtype;
             o.engine.override_activation_dtype = override_dtype;
             o.engine.activation_scale = activation_scale;
             o.engine.kv_cache_dtype = kv_cache_dtype;
             o.engine.max_model_len = max_model_len;
             o.engine.linear_backend = linear_backend;
             o.engine.moe_backend = moe_backend;
             o.engine.a16_max_tokens = a16_max_tokens;
             o.engine.threads = threads;
             o.engine.max_num_seqs = max_num_seqs;
             o.engine.max_num_batched_tokens = max_num_batched_tokens;
             o.engine.kv_cache_memory_bytes = kv_cache_memory_bytes;
             o.engine.enable_prefix_caching = enable_prefix_caching;
             o.engine.block_size = block_size;
             o.engine.speculative_config = speculative_config;
             return std::make_unique<python::OfflineEngine>(o);
           }),
           py::arg("model"), py::arg("dtype"), py::arg("override_activation_dtype"), py::arg("kv_cache_dtype"), py::arg("max_model_len"),
           py::arg("linear_backend"), py::arg("moe_backend"), py::arg("a16_max_tokens"), py::arg("threads"),
           py::arg("max_num_seqs"), py::arg("max_num_batched_tokens"), py::arg("kv_cache_memory_bytes"),
           py::arg("enable_prefix_caching"), py::arg("block_size"), py::arg("speculative_config"),
           py::arg("activation_scale") = "static", py::arg("tokenizer") = "")
      .def("generate",
           [](python::OfflineEngine& e, const py::list& requests, py::object on_progress) {
             std::vector<engine::RequestParams> reqs;
             for (const auto& r : requests) reqs.push_back(request_from(r.cast<py::dict>()));
             py::list out;
             for (const auto& r : e.generate(std::move(reqs), std::move(on_progress))) out.append(result_to_dict(r));
             return out;
           })
      .def("beam_search",
           [](python::OfflineEngine& e, const std::vector<std::vector<int32_t>>& prompts, int64_t beam_width,
              int64_t max_tokens, double length_penalty, bool ignore_eos, bool early_stopping) {
             engine::BeamSearchParams p;
             p.beam_width = beam_width;
             p.max_tokens = max_tokens;
             p.length_penalty = length_penalty;
             p.ignore_eos = ignore_eos;
             p.early_stopping = early_stopping;
             py::list out;
             for (const auto& beams : e.beam_search(prompts, p)) {
               py::list seqs;
               for (const auto& b : beams) {
                 py::dict d;
                 d["token_ids"] = b.tokens;
                 d["cum_logprob"] = b.cumulative_logprob;
                 d["eos"] = b.eos;
                 py::list lps;
                 for (const auto& lp : b.logprobs) lps.append(py::make_tuple(lp.id, lp.logprob, lp.top));
                 d["logprobs"] = lps;
                 seqs.append(d);
               }
               out.append(seqs);
             }
             return out;
           })
      .def("attach_images",
           [](python::OfflineEngine& e, std::vector<int32_t> prompt,
              const std::vector<std::pair<std::string, py::bytes>>& images, const std::string& model_name,
              const std::vector<std::pair<std::string, std::vector<std::tuple<std::string, py::bytes, int, int>>>>&
                  videos) {
             std::vector<python::NamedImage> named;
             named.reserve(images.size());
             for (const auto& [name, bytes] : images) named.push_back({name, std::string(bytes), 0, 0});
             // Videos: (name, [(frame name, bytes, width, height)]); width 0: encoded file bytes.
             std::vector<python::NamedVideo> vids;
             for (const auto& [name, frames] : videos) {
               python::NamedVideo v{name, {}};
               for (const auto& [fname, bytes, w, h] : frames) v.frames.push_back({fname, std::string(bytes), w, h});
               vids.push_back(std::move(v));
             }
             return e.attach_images(std::move(prompt), named, model_name, vids);
           },
           py::arg("prompt_token_ids"), py::arg("images"), py::arg("model_name"),
           py::arg("videos") = std::vector<std::pair<std::string, std::vector<std::tuple<std::string, py::bytes, int, int>>>>{})
      .def("check_accepts_images", &python::OfflineEngine::check_accepts_images, py::arg("model_name"))
      .def_property_readonly("has_tokenizer", &python::OfflineEngine::has_tokenizer)
      .def("encode",
           [](const python::OfflineEngine& e, const std::string& text, bool add_special_tokens) {
             return e.tokenizer().encode(text, add_special_tokens);
           })
      .def("decode",
           [](const python::OfflineEngine& e, const std::vector<int32_t>& ids, bool skip_special_tokens) {
             return py::bytes(e.tokenizer().decode(ids, skip_special_tokens)).attr("decode")("utf-8", "replace");
           })
      // generation_config.json's request defaults, as the server reads them (LLM's
      // get_default_sampling_params; keys as SamplingParams names them).
      .def("sampling_defaults",
           [](const python::OfflineEngine& e) {
             const engine::SamplingDefaults d = e.sampling_defaults();
             py::dict out;
             if (d.temperature) out["temperature"] = *d.temperature;
             if (d.top_p) out["top_p"] = *d.top_p;
             if (d.min_p) out["min_p"] = *d.min_p;
             if (d.repetition_penalty) out["repetition_penalty"] = *d.repetition_penalty;
             if (d.top_k) out["top_k"] = *d.top_k;
             if (d.max_tokens) out["max_tokens"] = *d.max_tokens;
             return out;
           })
      .def("token_eos_id", [](const python::OfflineEngine& e) { return e.tokenizer().eos_id(); })
      .def("tokenizer_vocab_size", [](const python::OfflineEngine& e) { return e.tokenizer().vocab_size(); })
      .def("apply_chat_template", &python::OfflineEngine::apply_chat_template)
      .def_property_readonly("max_model_len", &python::OfflineEngine::max_model_len)
      .def_property_readonly("vocab_size", &python::OfflineEngine::vocab_size)
      .def_property_readonly("canvas_length", &python::OfflineEngine::canvas_length)
      .def("default_max_tokens",
           [](const python::OfflineEngine& e, int64_t prompt_len) {
             return engine::default_max_tokens(e.max_model_len(), prompt_len, e.canvas_length());
           })
      .def_property_readonly("eos_ids", &python::OfflineEngine::eos_ids);
}
