// `fp4lm convert` (engine/convert/): GGUF files written here from a small random Llama — its q/k
// rows permuted as llama.cpp's converter permutes them, its weights in each ggml type the converter
// reads — converted back and checked against the original weights, a plain decoding of each
// block type, and the original model's logits; the tokenizer files against the fp4lm tokenizer;
// and every refusal naming what it refuses.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>

#include "reference/logits_check.h"
#include "reference/tiny_models.h"
#include "common/error_of.h"
#include "common/gguf_writer.h"
#include "common/paths.h"
#include "core/dtype.h"
#include "engine/convert/gguf_convert.h"
#include "engine/convert/gguf_tokenizer.h"
#include "engine/convert/llama_qk_rows.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::engine::gguf_convert_test {
namespace {

using test::error_of;
using test::GgufBuilder;
using test::TempDir;

constexpr uint32_t kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8, kBF16 = 30, kQ4_K = 12;

// ---- the tokenizer of the test files: 3 control tokens, printable ASCII except '~', and "he" ----
std::vector<std::string> vocab_tokens() {
  std::vector<std::string> t = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (char c = 33; c < 126; ++c) t.emplace_back(1, c);
  t.push_back("he");
  return t;  // 3 + 93 + 1 = 97, make_tiny_model's vocabulary
}

void add_tokenizer(GgufBuilder& g) {
  const auto toks = vocab_tokens();
  std::vector<int32_t> types(toks.size(), 1);
  types[0] = types[1] = types[2] = 3;
  g.str("tokenizer.ggml.model", "gpt2");
  g.str("tokenizer.ggml.pre", "smollm");
  g.str_array("tokenizer.ggml.tokens", toks);
  g.i32_array("tokenizer.ggml.token_type", types);
  g.str_array("tokenizer.ggml.merges", {"h e"});
  g.u32("tokenizer.ggml.bos_token_id", 1);
  g.u32("tokenizer.ggml.eos_token_id", 2);
  g.u32("tokenizer.ggml.unknown_token_id", 0);
  g.u32("tokenizer.ggml.padding_token_id", 2);
  g.boolean("tokenizer.ggml.add_bos_token", false);
  g.boolean("tokenizer.ggml.add_space_prefix", false);
  g.str("tokenizer.chat_template",
        "{% for m in messages %}<|im_start|>{{ m['role'] }}:{{ m['content'] }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant:{% endif %}");
}

// ---- encoders for the block types (the test's own, from ggml's definitions) ----
template <class T>
void put(std::vector<uint8_t>& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}

// Random blocks of `type` for `n` elements, and their values decoded from the definitions.
std::vector<uint8_t> random_blocks(uint32_t type, size_t n, std::mt19937& rng, std::vector<float>& values) {
  std::vector<uint8_t> b;
  values.assign(n, 0.f);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  if (type == kQ4_K) return std::vector<uint8_t>(n / 256 * 144);  // only its size matters: it is refused
  if (type == kF16 || type == kBF16) {
    for (size_t i = 0; i < n; ++i) {
      const float x = u(rng);
      const uint16_t h = type == kF16 ? f32_to_f16(x) : f32_to_bf16(x);
      put(b, h);
      values[i] = type == kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    return b;
  }
  for (size_t blk = 0; blk < n / 32; ++blk) {
    const uint16_t d = f32_to_f16(std::abs(u(rng)) * 0.1f), m = f32_to_f16(u(rng) * 0.2f);
    const double df = f16_to_f32(d), mf = f16_to_f32(m);
    put(b, d);
    if (type == kQ4_1) put(b, m);
    for (int j = 0; j < (type == kQ8_0 ? 32 : 16); ++j) {
      const int x = static_cast<int>(rng() % 256);
      b.push_back(static_cast<uint8_t>(x));
      if (type == kQ8_0) values[blk * 32 + j] = static_cast<float>(df * static_cast<int8_t>(x));
      else if (type == kQ4_0) {
        values[blk * 32 + j] = static_cast<float>(df * ((x & 15) - 8));
        values[blk * 32 + 16 + j] = static_cast<float>(df * ((x >> 4) - 8));
      } else {
        values[blk * 32 + j] = static_cast<float>(df * (x & 15) + mf);
        values[blk * 32 + 16 + j] = static_cast<float>(df * (x >> 4) + mf);
      }
    }
  }
  return b;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The tiny Llama (rope_scaling removed: the converter writes none) as a GGUF file, llama.cpp's
// names and q/k row order, every tensor F32.
test::TinyModel tiny_llama() {
  test::TinyModel m = test::make_tiny_model("LlamaForCausalLM");
  m.config.erase("rope_scaling");
  return m;
}

// `types`: ggml types for some tensors (random blocks of that type instead of the model's
// weights; `want` gets their values in HF's row order). `edit` adds metadata or tensors before the
// model's tensors; `skip_key` leaves one metadata key out and `replace` writes its stand-in.
GgufBuilder llama_gguf(const test::TinyModel& m, const std::map<std::string, uint32_t>& types = {},
                       std::map<std::string, std::vector<float>>* want = nullptr,
                       const std::function<void(GgufBuilder&)>& edit = {}, bool with_tensors = true,
                       const std::string& skip_key = "", const std::function<void(GgufBuilder&)>& replace = {}) {
  const auto& c = m.config;
  const int64_t heads = c["num_attention_heads"], kv = c["num_key_value_heads"];
  GgufBuilder all, g;
  g.str("general.architecture", "llama");
  g.str("general.name", "tiny test llama");
  g.u32("general.file_type", 0);
  g.u32("llama.block_count", c["num_hidden_layers"].get<uint32_t>());
  g.u32("llama.context_length", c["max_position_embeddings"].get<uint32_t>());
  g.u32("llama.embedding_length", c["hidden_size"].get<uint32_t>());
  g.u32("llama.feed_forward_length", c["intermediate_size"].get<uint32_t>());
  g.u32("llama.attention.head_count", static_cast<uint32_t>(heads));
  g.u32("llama.attention.head_count_kv", static_cast<uint32_t>(kv));
  g.f32("llama.rope.freq_base", c["rope_theta"].get<float>());
  g.f32("llama.attention.layer_norm_rms_epsilon", c["rms_norm_eps"].get<float>());
  g.u32("llama.vocab_size", c["vocab_size"].get<uint32_t>());
  g.u32("llama.rope.dimension_count", c["head_dim"].get<uint32_t>());
  add_tokenizer(g);
  // g holds every key; `all` gets them in order, less skip_key (replaced by `replace`).
  all = g;
  if (!skip_key.empty()) {
    all = g.without(skip_key);
    if (replace) replace(all);
  }
  g = all;
  if (edit) edit(g);
  if (!with_tensors) return g;
  std::mt19937 rng(11);
  auto add = [&](const std::string& gguf, const std::string& hf, int64_t permute_heads = 0) {
    const test::TinyTensor& t = m.w.at(hf);
    std::vector<uint64_t> dims(t.shape.rbegin(), t.shape.rend());
    auto it = types.find(gguf);
    if (it != types.end()) {
      std::vector<float> values;
      std::vector<uint8_t> blocks = random_blocks(it->second, t.v.size(), rng, values);
      if (want) {
        std::vector<float> hf_order = values;
        if (permute_heads) llama_unpermute_rows(values.data(), hf_order.data(), t.shape[0], t.shape[1], permute_heads);
        (*want)[hf] = hf_order;
      }
      g.tensor(gguf, dims, it->second, std::move(blocks));
      return;
    }
    std::vector<float> v = t.v;
    if (permute_heads) llama_permute_rows(t.v.data(), v.data(), t.shape[0], t.shape[1], permute_heads);
    g.tensor(gguf, dims, kF32, f32_bytes(v));
  };
  add("token_embd.weight", "model.embed_tokens.weight");
  for (int64_t l = 0; l < c["num_hidden_layers"].get<int64_t>(); ++l) {
    const std::string b = fmt::format("blk.{}.", l), h = fmt::format("model.layers.{}.", l);
    add(b + "attn_norm.weight", h + "input_layernorm.weight");
    add(b + "attn_q.weight", h + "self_attn.q_proj.weight", heads);
    add(b + "attn_k.weight", h + "self_attn.k_proj.weight", kv);
    add(b + "attn_v.weight", h + "self_attn.v_proj.weight");
    add(b + "attn_output.weight", h + "self_attn.o_proj.weight");
    add(b + "ffn_norm.weight", h + "post_attention_layernorm.weight");
    add(b + "ffn_gate.weight", h + "mlp.gate_proj.weight");
    add(b + "ffn_up.weight", h + "mlp.up_proj.weight");
    add(b + "ffn_down.weight", h + "mlp.down_proj.weight");
  }
  add("output_norm.weight", "model.norm.weight");
  return g;
}

ConvertSummary convert(const std::filesystem::path& gguf, const std::filesystem::path& out, DType dt = DType::F32) {
  ConvertOptions o;
  o.gguf_path = gguf.string();
  o.out_dir = out.string();
  o.dtype = dt;
  return convert_gguf(o);
}

std::vector<float> read_f32(const io::SafetensorsFile& st, const std::string& name) {
  const TensorView& v = st.get(name);
  std::vector<float> out(static_cast<size_t>(v.numel()));
  to_f32_n(v.data, v.dtype, out.data(), out.size());
  return out;
}

TEST(LlamaQkRows, UnpermuteUndoesPermuteAndMatchesTheFormula) {
  // One head of 4 rows: llama.cpp interleaves HF's halves [r0 r1 | r2 r3] as [r0 r2 r1 r3].
  const std::vector<float> gguf = {0, 0, 1, 1, 2, 2, 3, 3};
  std::vector<float> hf(8);
  llama_unpermute_rows(gguf.data(), hf.data(), 4, 2, 1);
  EXPECT_EQ(hf, (std::vector<float>{0, 0, 2, 2, 1, 1, 3, 3}));
  std::mt19937 rng(5);
  std::vector<float> a(24 * 7), p(a.size()), back(a.size());
  for (float& x : a) x = static_cast<float>(rng() % 1000);
  for (int64_t heads : {1, 2, 3, 6, 12}) {
    llama_permute_rows(a.data(), p.data(), 24, 7, heads);
    llama_unpermute_rows(p.data(), back.data(), 24, 7, heads);
    EXPECT_EQ(back, a) << heads;
    if (heads < 12) {  // 12 heads of 2 rows: the identity
      EXPECT_NE(p, a) << heads;
    }
  }
  EXPECT_EQ(error_of([&] { llama_unpermute_rows(a.data(), p.data(), 24, 7, 5); }),
            "q/k row permutation: 24 rows is not a multiple of 2 x 5 heads");
}

TEST(GgufConvert, F32LlamaComesBackBitForBitAndRunsTheSame) {
  TempDir tmp;
  const test::TinyModel m = tiny_llama();
  llama_gguf(m).write(tmp / "m.gguf");
  const ConvertSummary s = convert(tmp / "m.gguf", tmp / "hf");
  EXPECT_EQ(s.architecture, "LlamaForCausalLM");
  EXPECT_TRUE(s.tied_embeddings);
  EXPECT_EQ(s.tensors, m.w.size());
  EXPECT_TRUE(s.not_converted.empty());
  EXPECT_EQ(s.keys.at("llama.attention.head_count_kv"), "config.json num_key_value_heads");
  EXPECT_EQ(s.keys.at("general.name"), "model.safetensors __metadata__ gguf.general.name");

  auto st = io::SafetensorsFile::open((tmp / "hf" / "model.safetensors").string());
  for (const auto& [name, t] : m.w) {
    ASSERT_NE(st->find(name), nullptr) << name;
    EXPECT_EQ(st->get(name).shape, t.shape) << name;
    EXPECT_EQ(read_f32(*st, name), t.v) << name;
  }
  EXPECT_EQ(st->metadata().at("gguf.general.name"), "tiny test llama");

  const nlohmann::json cfg = io::read_json_file((tmp / "hf" / "config.json").string());
  for (const char* k : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
                        "tie_word_embeddings", "rms_norm_eps", "rope_theta"})
    EXPECT_EQ(cfg[k], m.config[k]) << k;
  EXPECT_EQ(cfg["architectures"], nlohmann::json({"LlamaForCausalLM"}));
  EXPECT_TRUE(cfg["rope_scaling"].is_null());

  // The converted checkpoint computes what the original computes.
  test::write_tiny_model(m, tmp / "orig");
  const std::vector<int32_t> toks = {3, 50, 7, 96, 12, 40};
  EXPECT_TRUE(model::bit_identical(model::checkpoint_logits((tmp / "hf").string(), toks),
                                   model::checkpoint_logits((tmp / "orig").string(), toks)));
}

TEST(GgufConvert, EachBlockTypeDecodesAsDefinedAndRoundsToTheDtype) {
  TempDir tmp;
  const test::TinyModel m = tiny_llama();
  // Layer 0's q/k go through the permutation as well as their block type.
  const std::map<std::string, uint32_t> types = {{"blk.0.attn_q.weight", kQ4_0},   {"blk.0.attn_k.weight", kQ4_1},
                                                 {"blk.0.attn_v.weight", kQ8_0},   {"blk.0.ffn_gate.weight", kF16},
                                                 {"blk.0.ffn_up.weight", kBF16},   {"token_embd.weight", kQ8_0}};
  std::map<std::string, std::vector<float>> want;
  llama_gguf(m, types, &want).write(tmp / "m.gguf");
  const ConvertSummary s = convert(tmp / "m.gguf", tmp / "hf", DType::BF16);
  EXPECT_EQ(s.source_types.at("Q8_0"), 2u);
  EXPECT_EQ(s.source_types.at("Q4_0"), 1u);
  EXPECT_EQ(s.source_types.at("F32"), m.w.size() - 6);
  auto st = io::SafetensorsFile::open((tmp / "hf" / "model.safetensors").string());
  ASSERT_EQ(want.size(), 6u);
  for (const auto& [name, v] : want) {
    EXPECT_EQ(st->get(name).dtype, DType::BF16);
    const std::vector<float> got = read_f32(*st, name);
    ASSERT_EQ(got.size(), v.size());
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], bf16_to_f32(f32_to_bf16(v[i]))) << name << " " << i;
  }
  const nlohmann::json cfg = io::read_json_file((tmp / "hf" / "config.json").string());
  EXPECT_EQ(cfg["torch_dtype"], "bfloat16");
}

TEST(GgufConvert, TokenizerFilesAreWhatTheGgufDescribes) {
  TempDir tmp;
  llama_gguf(tiny_llama()).write(tmp / "m.gguf");
  convert(tmp / "m.gguf", tmp / "hf");
  auto tok = tokenizer::Tokenizer::from_dir((tmp / "hf").string());
  EXPECT_EQ(tok->vocab_size(), 97u);
  // "he" is merged; digits are split one by one (smollm's pre-tokenizer); control tokens are special.
  const std::vector<int32_t> ids = tok->encode("<|im_start|>hehe!42<|im_end|>");
  const auto id = [&](const char* t) { return *tok->token_to_id(t); };
  EXPECT_EQ(ids, (std::vector<int32_t>{1, id("he"), id("he"), id("!"), id("4"), id("2"), 2}));
  EXPECT_TRUE(tok->is_special(1));
  EXPECT_FALSE(tok->is_special(id("he")));
  EXPECT_EQ(tok->decode(ids, true), "hehe!42");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  const nlohmann::json tj = io::read_json_file((tmp / "hf" / "tokenizer.json").string());
  EXPECT_EQ(tj["pre_tokenizer"]["pretokenizers"][0], nlohmann::json({{"type", "Digits"}, {"individual_digits", true}}));
  EXPECT_EQ(tj["model"]["merges"], nlohmann::json({"h e"}));
  EXPECT_EQ(tj["added_tokens"].size(), 3u);
  const nlohmann::json tc = io::read_json_file((tmp / "hf" / "tokenizer_config.json").string());
  EXPECT_EQ(tc["bos_token"], "<|im_start|>");
  EXPECT_EQ(tc["eos_token"], "<|im_end|>");
  EXPECT_EQ(tc["unk_token"], "<|endoftext|>");
  EXPECT_EQ(tc["pad_token"], "<|im_end|>");
  EXPECT_EQ(tc["add_bos_token"], false);
  const auto chat = tokenizer::ChatTemplate::from_dir((tmp / "hf").string());
  tokenizer::ChatOptions co;
  co.add_generation_prompt = true;
  EXPECT_EQ(chat.render(nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}}), co),
            "<|im_start|>user:hi<|im_end|><|im_start|>assistant:");
  const nlohmann::json gen = io::read_json_file((tmp / "hf" / "generation_config.json").string());
  EXPECT_EQ(gen, nlohmann::json({{"bos_token_id", 1}, {"eos_token_id", 2}, {"pad_token_id", 2}}));
}

// A copy of the tiny model's GGUF with `edit` applied to the builder before the tensors.
std::string convert_error(const std::function<void(GgufBuilder&)>& edit, bool with_tensors = true) {
  TempDir tmp;
  GgufBuilder g = llama_gguf(tiny_llama(), {}, nullptr, edit, with_tensors);
  g.write(tmp / "m.gguf");
  return error_of([&] { convert(tmp / "m.gguf", tmp / "hf"); });
}

TEST(GgufConvert, RefusesWhatItCannotConvertNamingIt) {
  const std::string p = "m.gguf: ";
  auto has = [](const std::string& e, const std::string& part) {
    return e.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                             : ::testing::AssertionFailure() << "'" << e << "' lacks '" << part << "'";
  };
  EXPECT_TRUE(has(convert_error([](GgufBuilder& g) { g.str("general.architecture", "qwen2"); }),
                  "metadata key 'general.architecture' appears twice"));
  EXPECT_TRUE(has(convert_error([](GgufBuilder& g) { g.u32("llama.expert_count", 8); }),
                  "metadata key 'llama.expert_count': mixture-of-experts GGUF files are not supported"));
  EXPECT_TRUE(has(convert_error([](GgufBuilder& g) { g.f32("llama.attention.clamp_kqv", 8.f); }),
                  "metadata key 'llama.attention.clamp_kqv' (8.0) is not understood by fp4lm convert"));
  EXPECT_TRUE(has(convert_error([](GgufBuilder& g) { g.str("llama.rope.scaling.type", "yarn"); }),
                  "'llama.rope.scaling.type': 'yarn' is not supported"));
  EXPECT_TRUE(has(convert_error([](GgufBuilder& g) { g.u32("llama.rope.dimension_count", 4); }),
                  "metadata key 'llama.rope.dimension_count' appears twice"));
  EXPECT_TRUE(has(convert_error([](GgufBuilder& g) { g.tensor("blk.0.attn_q.bias", {32}, kF32, std::vector<uint8_t>(128)); }),
                  "tensor 'blk.0.attn_q.bias' is not part of a 3-layer llama model"));
  EXPECT_TRUE(has(convert_error([](GgufBuilder& g) { g.tensor("rope_freqs.weight", {4}, kF32, std::vector<uint8_t>(16)); }),
                  "tensor 'rope_freqs.weight' (Llama 3.1-style RoPE frequency factors) is not supported"));
  EXPECT_TRUE(has(convert_error([](GgufBuilder&) {}, false), "tensor 'blk.0.attn_k.weight' (model.layers.0.self_attn.k_proj.weight) is missing (29 expected tensors missing in all)"));
}

TEST(GgufConvert, RefusesOtherArchitecturesTypesAndTokenizers) {
  TempDir tmp;
  auto error_with = [&](const std::string& key_to_change, const std::function<void(GgufBuilder&)>& add,
                        const std::map<std::string, uint32_t>& types = {}) {
    GgufBuilder g = llama_gguf(tiny_llama(), types, nullptr, {}, true, key_to_change, add);
    g.write(tmp / "m.gguf");
    return error_of([&] { convert(tmp / "m.gguf", tmp / "hf"); });
  };
  EXPECT_EQ(error_with("general.architecture", [](GgufBuilder& g) { g.str("general.architecture", "qwen2"); }),
            (tmp / "m.gguf").string() +
                ": metadata key 'general.architecture': 'qwen2' is not supported by fp4lm convert (supported: llama)");
  EXPECT_EQ(error_with("tokenizer.ggml.model", [](GgufBuilder& g) { g.str("tokenizer.ggml.model", "llama"); }),
            (tmp / "m.gguf").string() +
                ": metadata key 'tokenizer.ggml.model': 'llama' is not supported; fp4lm convert reads 'gpt2' "
                "(byte-level BPE) tokenizers only");
  EXPECT_NE(error_with("tokenizer.ggml.pre", [](GgufBuilder& g) { g.str("tokenizer.ggml.pre", "qwen2"); })
                .find("metadata key 'tokenizer.ggml.pre': pre-tokenizer 'qwen2' is not supported"),
            std::string::npos);
  EXPECT_NE(error_with("llama.vocab_size", [](GgufBuilder& g) { g.u32("llama.vocab_size", 98); })
                .find("llama.vocab_size 98 differs from the 97 tokens of tokenizer.ggml.tokens"),
            std::string::npos);
  EXPECT_NE(error_with("tokenizer.ggml.merges", [](GgufBuilder& g) { g.str_array("tokenizer.ggml.merges", {"h x"}); })
                .find("'tokenizer.ggml.merges'[0] 'h x': 'hx' is not in the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_with("tokenizer.ggml.eos_token_id", [](GgufBuilder& g) { g.u32("tokenizer.ggml.eos_token_id", 97); })
                .find("'tokenizer.ggml.eos_token_id': token id 97 is outside the vocabulary (97 tokens)"),
            std::string::npos);
  EXPECT_NE(error_with("", {}, {{"blk.1.ffn_up.weight", kQ4_K}}).find(
                "tensor 'blk.1.ffn_up.weight': type Q4_K stores blocks of 256 elements, but its row length (dim 0) is 32"),
            std::string::npos);
  // A key the converter does not map outside the architecture's namespace is reported, not fatal.
  const auto s = [&] {
    GgufBuilder g = llama_gguf(tiny_llama(), {}, nullptr, [](GgufBuilder& b) { b.u32("tokenizer.ggml.eot_token_id", 2); });
    g.write(tmp / "m.gguf");
    return convert(tmp / "m.gguf", tmp / "hf");
  }();
  EXPECT_EQ(s.not_converted, (std::vector<std::string>{"tokenizer.ggml.eot_token_id (a tokenizer key fp4lm convert does not map)"}));
  // OUT exists: refused without force.
  EXPECT_EQ(error_of([&] { convert(tmp / "m.gguf", tmp / "hf"); }),
            (tmp / "hf").string() + ": already exists (pass --force to replace it)");
}

}  // namespace
}  // namespace fp4lm::engine::gguf_convert_test
