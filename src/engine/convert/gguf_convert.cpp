// GGUF -> Hugging Face checkpoint (engine/convert/gguf_convert.h).
#include "engine/convert/gguf_convert.h"


#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/convert/gguf_tokenizer.h"
#include "engine/convert/llama_qk_rows.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "io/staged_output_dir.h"
#include "quant/ggml_dequant.h"

namespace fp4lm::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A float32 metadata value as its shortest decimal (1e-05, not 9.999999747378752e-06).
double as_written(const io::GgufFile& f, const std::string& key) {
  const io::GgufKv* kv = f.find(key);
  const double v = f.get_float(key);
  return kv->type == io::GgufType::F32 ? std::stod(fmt::format("{}", static_cast<float>(v))) : v;
}

// One output tensor: where it comes from and what HF calls it.
struct Mapped {
  const io::GgufTensor* src;
  std::string hf_name;
  Shape hf_shape;          // [rows, cols] or [n]
  int64_t unpermute_heads = 0;  // q/k: llama.cpp's row permutation to undo with this many heads
};

struct LlamaDims {
  int64_t layers, hidden, inter, heads, kv_heads, head_dim, vocab;
};

std::vector<Mapped> map_llama_tensors(const io::GgufFile& f, const LlamaDims& d, bool& tied) {
  std::map<std::string, std::tuple<std::string, Shape, int64_t>> want;  // gguf name -> hf name, shape, heads
  want["token_embd.weight"] = {"model.embed_tokens.weight", {d.vocab, d.hidden}, 0};
  want["output_norm.weight"] = {"model.norm.weight", {d.hidden}, 0};
  for (int64_t l = 0; l < d.layers; ++l) {
    const std::string g = fmt::format("blk.{}.", l), h = fmt::format("model.layers.{}.", l);
    want[g + "attn_norm.weight"] = {h + "input_layernorm.weight", {d.hidden}, 0};
    want[g + "ffn_norm.weight"] = {h + "post_attention_layernorm.weight", {d.hidden}, 0};
    want[g + "attn_q.weight"] = {h + "self_attn.q_proj.weight", {d.heads * d.head_dim, d.hidden}, d.heads};
    want[g + "attn_k.weight"] = {h + "self_attn.k_proj.weight", {d.kv_heads * d.head_dim, d.hidden}, d.kv_heads};
    want[g + "attn_v.weight"] = {h + "self_attn.v_proj.weight", {d.kv_heads * d.head_dim, d.hidden}, 0};
    want[g + "attn_output.weight"] = {h + "self_attn.o_proj.weight", {d.hidden, d.heads * d.head_dim}, 0};
    want[g + "ffn_gate.weight"] = {h + "mlp.gate_proj.weight", {d.inter, d.hidden}, 0};
    want[g + "ffn_up.weight"] = {h + "mlp.up_proj.weight", {d.inter, d.hidden}, 0};
    want[g + "ffn_down.weight"] = {h + "mlp.down_proj.weight", {d.hidden, d.inter}, 0};
  }
  tied = f.find_tensor("output.weight") == nullptr;
  if (!tied) want["output.weight"] = {"lm_head.weight", {d.vocab, d.hidden}, 0};

  std::vector<Mapped> out;
  for (const io::GgufTensor& t : f.tensors()) {
    auto it = want.find(t.name);
    if (it == want.end()) {
      if (t.name == "rope_freqs.weight")
        fail("{}: tensor 'rope_freqs.weight' (Llama 3.1-style RoPE frequency factors) is not supported by fp4lm "
             "convert",
             f.path());
      fail("{}: tensor '{}' is not part of a {}-layer llama model as fp4lm convert maps it (no bias, MoE or extra "
           "tensors)",
           f.path(), t.name, d.layers);
    }
    const auto& [hf_name, shape, heads] = it->second;
    // GGUF dims are fastest-first: HF's shape reversed.
    Shape dims(t.dims.rbegin(), t.dims.rend());
    Shape expect = shape;
    if (dims != expect)
      fail("{}: tensor '{}': expected HF shape [{}] ({}), found [{}]", f.path(), t.name, fmt::join(expect, ", "),
           hf_name, fmt::join(dims, ", "));
    if (!quant::ggml_can_dequantize(t.type))
      fail("{}: tensor '{}': ggml type {} cannot be converted (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)", f.path(),
           t.name, io::ggml_type_info(t.type)->name);
    out.push_back({&t, hf_name, shape, heads});
    want.erase(it);
  }
  if (!want.empty())
    fail("{}: tensor '{}' ({}) is missing ({} expected tensors missing in all)", f.path(), want.begin()->first,
         std::get<0>(want.begin()->second), want.size());
  return out;
}

void write_json(const fs::path& p, const json& j) {
  std::ofstream out(p);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) fail("{}: cannot write", p.string());
}

}  // namespace

ConvertSummary convert_gguf(const ConvertOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.dtype != DType::BF16 && o.dtype != DType::F16 && o.dtype != DType::F32)
    usage_fail("convert: --dtype must be bfloat16, float16 or float32");
  const fs::path out = fs::absolute(fs::path(o.out_dir).lexically_normal());
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!o.force) fail("{}: already exists (pass --force to replace it)", o.out_dir);
    if (!fs::is_directory(out, ec)) fail("{}: exists and is not a directory; not replacing it", o.out_dir);
  }
  auto f = io::GgufFile::open(o.gguf_path);
  const std::string& path = f->path();
  ConvertSummary s;
  std::map<std::string, std::string>& used = s.keys;

  const std::string arch = f->get_string("general.architecture");
  if (arch != "llama")
    fail("{}: metadata key 'general.architecture': '{}' is not supported by fp4lm convert (supported: llama)", path,
         arch);
  used["general.architecture"] = "config.json architectures LlamaForCausalLM";
  if (f->find("general.alignment")) used["general.alignment"] = "the data area's alignment (read)";
  s.architecture = "LlamaForCausalLM";

  auto uint_key = [&](const std::string& key, const std::string& where) {
    const uint64_t v = f->get_uint(key);
    if (v == 0 || v > (1ull << 40)) fail("{}: metadata key '{}': expected a positive size, found {}", path, key, v);
    used[key] = where;
    return static_cast<int64_t>(v);
  };
  LlamaDims d{};
  d.layers = uint_key("llama.block_count", "config.json num_hidden_layers");
  d.hidden = uint_key("llama.embedding_length", "config.json hidden_size");
  d.inter = uint_key("llama.feed_forward_length", "config.json intermediate_size");
  d.heads = uint_key("llama.attention.head_count", "config.json num_attention_heads");
  d.kv_heads = f->find("llama.attention.head_count_kv")
                   ? uint_key("llama.attention.head_count_kv", "config.json num_key_value_heads")
                   : d.heads;
  if (d.heads % d.kv_heads != 0)
    fail("{}: llama.attention.head_count {} is not a multiple of head_count_kv {}", path, d.heads, d.kv_heads);
  d.head_dim = d.hidden / d.heads;
  if (f->find("llama.attention.key_length")) {
    d.head_dim = uint_key("llama.attention.key_length", "config.json head_dim");
    if (f->find("llama.attention.value_length") &&
        uint_key("llama.attention.value_length", "config.json head_dim (equal to key_length)") != d.head_dim)
      fail("{}: llama.attention.value_length differs from key_length; not a Llama attention", path);
  } else if (d.hidden % d.heads != 0) {
    fail("{}: llama.embedding_length {} is not a multiple of head_count {} and no key_length is given", path, d.hidden,
         d.heads);
  }
  if (d.head_dim % 2 != 0) fail("{}: head_dim {} is odd; RoPE needs pairs", path, d.head_dim);
  if (f->find("llama.rope.dimension_count") &&
      uint_key("llama.rope.dimension_count", "RoPE over the whole head (equals head_dim)") != d.head_dim)
    fail("{}: llama.rope.dimension_count {} differs from head_dim {}: partial rotary is not a Llama model", path,
         f->get_uint("llama.rope.dimension_count"), d.head_dim);
  const int64_t ctx = uint_key("llama.context_length", "config.json max_position_embeddings");
  for (const char* k : {"llama.expert_count", "llama.expert_used_count"})
    if (f->find(k) && f->get_uint(k) != 0) fail("{}: metadata key '{}': mixture-of-experts GGUF files are not supported", path, k);
    else if (f->find(k)) used[k] = "0: a dense model";

  json rope_scaling = nullptr;
  if (f->find("llama.rope.scaling.type")) {
    const std::string type = f->get_string("llama.rope.scaling.type");
    used["llama.rope.scaling.type"] = "config.json rope_scaling";
    if (type == "linear") {
      rope_scaling = {{"rope_type", "linear"}, {"factor", as_written(*f, "llama.rope.scaling.factor")}};
      used["llama.rope.scaling.factor"] = "config.json rope_scaling.factor";
    } else if (type != "none") {
      fail("{}: metadata key 'llama.rope.scaling.type': '{}' is not supported (none or linear)", path, type);
    }
  }

  GgufTokenizer tok = gguf_tokenizer(*f, ctx, used);
  d.vocab = tok.vocab_size;
  if (f->find("llama.vocab_size") && uint_key("llama.vocab_size", "config.json vocab_size") != d.vocab)
    fail("{}: llama.vocab_size {} differs from the {} tokens of tokenizer.ggml.tokens", path,
         f->get_uint("llama.vocab_size"), d.vocab);

  json config = {{"architectures", {"LlamaForCausalLM"}},
                 {"model_type", "llama"},
                 {"hidden_size", d.hidden},
                 {"intermediate_size", d.inter},
                 {"num_hidden_layers", d.layers},
                 {"num_attention_heads", d.heads},
                 {"num_key_value_heads", d.kv_heads},
                 {"head_dim", d.head_dim},
                 {"max_position_embeddings", ctx},
                 {"vocab_size", d.vocab},
                 {"hidden_act", "silu"},
                 {"attention_bias", false},
                 {"attention_dropout", 0.0},
                 {"mlp_bias", false},
                 {"initializer_range", 0.02},
                 {"pretraining_tp", 1},
                 {"use_cache", true},
                 {"rope_scaling", rope_scaling},
                 {"torch_dtype", std::string(dtype_torch_name(o.dtype))}};
  config["rms_norm_eps"] = as_written(*f, "llama.attention.layer_norm_rms_epsilon");
  used["llama.attention.layer_norm_rms_epsilon"] = "config.json rms_norm_eps";
  config["rope_theta"] = f->find("llama.rope.freq_base") ? as_written(*f, "llama.rope.freq_base") : 10000.0;
  if (f->find("llama.rope.freq_base")) used["llama.rope.freq_base"] = "config.json rope_theta";
  for (const auto& [k, v] : tok.generation_ids.items()) config[k] = v;

  std::vector<Mapped> tensors = map_llama_tensors(*f, d, s.tied_embeddings);
  config["tie_word_embeddings"] = s.tied_embeddings;

  // Every other key: general.* describes the model (kept as safetensors metadata); anything else
  // is reported, and one of the architecture's own that is not understood stops the conversion.
  std::map<std::string, std::string> st_meta = {{"format", "pt"},
                                                {"fp4lm.converted_from", fs::path(path).filename().string()}};
  for (const io::GgufKv& kv : f->metadata()) {
    if (used.count(kv.key)) continue;
    if (kv.key.rfind("general.", 0) == 0) {
      st_meta["gguf." + kv.key] = kv.value.is_string() ? kv.value.get<std::string>() : kv.value.dump();
      used[kv.key] = "model.safetensors __metadata__ gguf." + kv.key;
    } else if (kv.key.rfind(arch + ".", 0) == 0) {
      fail("{}: metadata key '{}' ({}) is not understood by fp4lm convert; converting without it could change the "
           "model",
           path, kv.key, kv.value.is_array() ? fmt::format("array of {}", kv.value.size()) : kv.value.dump());
    } else {
      const std::string why = kv.key.rfind("tokenizer.", 0) == 0 ? "a tokenizer key fp4lm convert does not map"
                                                                  : "a key fp4lm convert does not know";
      s.not_converted.push_back(fmt::format("{} ({})", kv.key, why));
      used[kv.key] = "NOT CONVERTED: " + why;
    }
  }

  // Write everything into a temporary directory beside OUT.
  io::StagedOutputDir tmp(out, o.out_dir);
  io::SafetensorsStreamWriter::Layout layout;
  for (const Mapped& m : tensors) layout.emplace_back(m.hf_name, o.dtype, m.hf_shape);
  {
    io::SafetensorsStreamWriter w((tmp.path() / "model.safetensors").string(), layout, st_meta);
    std::vector<float> f32, hf;
    std::vector<uint8_t> bytes;
    for (const Mapped& m : tensors) {
      const io::GgufTensor& t = *m.src;
      f32.resize(t.numel);
      quant::ggml_dequantize(t.type, t.data, f32.data(), t.numel);
      const float* src = f32.data();
      if (m.unpermute_heads) {
        hf.resize(t.numel);
        llama_unpermute_rows(f32.data(), hf.data(), m.hf_shape[0], m.hf_shape[1], m.unpermute_heads);
        src = hf.data();
      }
      for (size_t i = 0; i < t.numel; ++i)
        if (!std::isfinite(src[i])) fail("{}: tensor '{}': element {} is not finite ({})", path, t.name, i, src[i]);
      bytes.resize(t.numel * dtype_size(o.dtype));
      from_f32_n(src, o.dtype, bytes.data(), t.numel);
      w.write_tensor(m.hf_name, bytes.data(), bytes.size());
      ++s.source_types[io::ggml_type_info(t.type)->name];
      ++s.tensors;
      s.bytes += bytes.size();
    }
    w.finish();
  }
  write_json(tmp.path() / "config.json", config);
  json gen = tok.generation_ids;
  write_json(tmp.path() / "generation_config.json", gen);
  write_json(tmp.path() / "tokenizer.json", tok.tokenizer);
  write_json(tmp.path() / "tokenizer_config.json", tok.tokenizer_config);
  tmp.publish();
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace fp4lm::engine
