// Decode throughput of the whole runtime against the memory roofline.
//
// Writes a synthetic NVFP4 checkpoint with real layer shapes — Qwen3-30B-A3B (MoE: hidden 2048,
// 128 experts, top-8, moe_intermediate 768, 32 heads / 4 KV heads, head_dim 128, vocab 151936)
// or Llama-3-8B (dense: hidden 4096, intermediate 14336, 32 / 8 heads, vocab 128256) — with
// --layers decoder layers. Codes and block scales are random bytes written directly (the
// reference quantizer over GBs of floats would take minutes); scales are chosen so activations
// stay O(1). Then: load, prefill a short prompt, decode --tokens tokens at M=1, and compare with
// the roofline = (weight + KV bytes one decode step must read) / (read bandwidth measured in
// the same process at the same thread count).
//
//   decode_bench --arch moe|dense [--layers N] [--threads T] [--tokens N] [--prompt N] [--dir PATH]
//                [--override-activation-dtype bfloat16] [--bf16-lm-head]
//                [--linear-backend NAME] [--moe-backend NAME]
// To compare with the AVX2 kernels end to end: FP4LM_DISABLE_ISA=avx512 decode_bench ...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/process_stats.h"
#include "engine/sampler.h"
#include "io/safetensors.h"
#include "kernels/registry.h"
#include "model/causal_lm.h"

namespace {

using namespace fp4lm;
using nlohmann::json;
namespace fs = std::filesystem;

struct Shapes {
  std::string arch;
  int64_t hidden, heads, kv_heads, head_dim, vocab, inter;  // inter: dense MLP or expert
  int64_t experts = 0, top_k = 0;
};

Shapes qwen3_30b_a3b() { return {"Qwen3MoeForCausalLM", 2048, 32, 4, 128, 151936, 768, 128, 8}; }
Shapes llama3_8b() { return {"LlamaForCausalLM", 4096, 32, 8, 128, 128256, 14336}; }

uint64_t g_rng = 0x9e3779b97f4a7c15ull;
uint64_t next_rand() {
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct Tensor {
  std::string name;
  DType dtype;
  Shape shape;
  enum Fill { codes, scales, bf16_small, bf16_one, f32_value } fill;
  float value = 0;
};

void add_nvfp4(std::vector<Tensor>& t, const std::string& m, int64_t n, int64_t k) {
  t.push_back({m + ".weight", DType::U8, {n, k / 2}, Tensor::codes});
  t.push_back({m + ".weight_scale", DType::F8_E4M3, {n, k / 16}, Tensor::scales});
  // |w| ≈ sqrt(8.6) × scale × s2 ≈ 1/sqrt(k): unit-gain layers.
  t.push_back({m + ".weight_scale_2", DType::F32, {}, Tensor::f32_value, 1.0f / std::sqrt(8.6f * k)});
  t.push_back({m + ".input_scale", DType::F32, {}, Tensor::f32_value, 8.0f / 2688.0f});
}

std::vector<Tensor> layout(const Shapes& s, int64_t layers, bool bf16_head) {
  std::vector<Tensor> t;
  t.push_back({"model.embed_tokens.weight", DType::BF16, {s.vocab, s.hidden}, Tensor::bf16_small});
  t.push_back({"model.norm.weight", DType::BF16, {s.hidden}, Tensor::bf16_one});
  if (bf16_head) t.push_back({"lm_head.weight", DType::BF16, {s.vocab, s.hidden}, Tensor::bf16_small});
  else add_nvfp4(t, "lm_head", s.vocab, s.hidden);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}", l);
    t.push_back({p + ".input_layernorm.weight", DType::BF16, {s.hidden}, Tensor::bf16_one});
    t.push_back({p + ".post_attention_layernorm.weight", DType::BF16, {s.hidden}, Tensor::bf16_one});
    add_nvfp4(t, p + ".self_attn.q_proj", s.heads * s.head_dim, s.hidden);
    add_nvfp4(t, p + ".self_attn.k_proj", s.kv_heads * s.head_dim, s.hidden);
    add_nvfp4(t, p + ".self_attn.v_proj", s.kv_heads * s.head_dim, s.hidden);
    add_nvfp4(t, p + ".self_attn.o_proj", s.hidden, s.heads * s.head_dim);
    if (s.experts == 0) {
      add_nvfp4(t, p + ".mlp.gate_proj", s.inter, s.hidden);
      add_nvfp4(t, p + ".mlp.up_proj", s.inter, s.hidden);
      add_nvfp4(t, p + ".mlp.down_proj", s.hidden, s.inter);
      continue;
    }
    t.push_back({p + ".self_attn.q_norm.weight", DType::BF16, {s.head_dim}, Tensor::bf16_one});
    t.push_back({p + ".self_attn.k_norm.weight", DType::BF16, {s.head_dim}, Tensor::bf16_one});
    t.push_back({p + ".mlp.gate.weight", DType::BF16, {s.experts, s.hidden}, Tensor::bf16_small});
    for (int64_t e = 0; e < s.experts; ++e) {
      const std::string ep = fmt::format("{}.mlp.experts.{}", p, e);
      add_nvfp4(t, ep + ".gate_proj", s.inter, s.hidden);
      add_nvfp4(t, ep + ".up_proj", s.inter, s.hidden);
      add_nvfp4(t, ep + ".down_proj", s.hidden, s.inter);
    }
  }
  return t;
}

void fill(const Tensor& t, std::vector<uint8_t>& buf) {
  buf.resize(static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype));
  switch (t.fill) {
    case Tensor::codes:
      for (size_t i = 0; i < buf.size(); i += 8) {
        uint64_t r = next_rand();
        std::memcpy(buf.data() + i, &r, std::min<size_t>(8, buf.size() - i));
      }
      break;
    case Tensor::scales:  // E4M3 0x30..0x3F: 0.5 .. 1.875
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(0x30 + (next_rand() & 15));
      break;
    case Tensor::bf16_small:
    case Tensor::bf16_one: {
      auto* p = reinterpret_cast<uint16_t*>(buf.data());
      for (size_t i = 0; i < buf.size() / 2; ++i) {
        float v = t.fill == Tensor::bf16_one ? 1.0f
                                             : (static_cast<float>(next_rand() % 2001) / 1000.0f - 1.0f) * 0.05f;
        p[i] = f32_to_bf16(v);
      }
      break;
    }
    case Tensor::f32_value:
      std::memcpy(buf.data(), &t.value, 4);
      break;
  }
}

json config_json(const Shapes& s, int64_t layers, bool bf16_head) {
  json c = {{"architectures", {s.arch}},
            {"vocab_size", s.vocab},
            {"hidden_size", s.hidden},
            {"num_hidden_layers", layers},
            {"num_attention_heads", s.heads},
            {"num_key_value_heads", s.kv_heads},
            {"head_dim", s.head_dim},
            {"intermediate_size", s.experts ? 6144 : s.inter},
            {"max_position_embeddings", 40960},
            {"rms_norm_eps", 1e-6},
            {"rope_theta", s.experts ? 1000000.0 : 500000.0},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", false},
            {"bos_token_id", 1},
            {"eos_token_id", 2},
            {"torch_dtype", "bfloat16"}};
  if (s.experts) {
    c["num_experts"] = s.experts;
    c["num_experts_per_tok"] = s.top_k;
    c["moe_intermediate_size"] = s.inter;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = json::array();
  }
  json exclude = json::array();
  if (bf16_head) exclude.push_back("lm_head");
  if (s.experts) exclude.push_back("model.layers.*.mlp.gate");
  c["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16},
                              {"ignore", exclude}};
  return c;
}

void write_checkpoint(const std::string& dir, const Shapes& s, int64_t layers, bool bf16_head) {
  fs::create_directories(dir);
  const std::vector<Tensor> ts = layout(s, layers, bf16_head);
  io::SafetensorsStreamWriter::Layout lay;
  for (const Tensor& t : ts) lay.emplace_back(t.name, t.dtype, t.shape);
  io::SafetensorsStreamWriter w(dir + "/model.safetensors", lay);
  std::vector<uint8_t> buf;
  for (const Tensor& t : ts) {
    fill(t, buf);
    w.write_tensor(t.name, buf.data(), buf.size());
  }
  w.finish();
  std::ofstream(dir + "/config.json") << config_json(s, layers, bf16_head).dump(2);
}

// Bytes one decode step reads: every weight except the experts not chosen (top_k of them are),
// the embedding row, and the KV cache up to `ctx` positions.
double bytes_per_token(const Shapes& s, int64_t layers, bool bf16_head, int64_t ctx) {
  auto nvfp4 = [](int64_t n, int64_t k) { return static_cast<double>(n) * k * (0.5 + 1.0 / 16); };
  double per_layer = nvfp4((s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden) + nvfp4(s.hidden, s.heads * s.head_dim);
  if (s.experts) per_layer += 2.0 * s.experts * s.hidden + s.top_k * (nvfp4(2 * s.inter, s.hidden) + nvfp4(s.hidden, s.inter));
  else per_layer += nvfp4(2 * s.inter, s.hidden) + nvfp4(s.hidden, s.inter);
  per_layer += 2.0 * s.kv_heads * s.head_dim * ctx * 2;  // bf16 K and V
  const double head = bf16_head ? 2.0 * s.vocab * s.hidden : nvfp4(s.vocab, s.hidden);
  return layers * per_layer + head + 2.0 * s.hidden;
}

// Sustained read bandwidth (bytes/s) of `pool`'s threads over a buffer far larger than the caches.
double read_bandwidth(ThreadPool& pool) {
  const size_t words = (size_t{1} << 30) / 8;  // 1 GiB
  std::vector<uint64_t> buf(words);
  for (size_t i = 0; i < words; ++i) buf[i] = i * 0x9e3779b97f4a7c15ull;
  double best = 0;
  volatile uint64_t sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<uint64_t> part(static_cast<size_t>(pool.size()) + 1, 0);
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(static_cast<int64_t>(words / 8), [&](int64_t b, int64_t e, int t) {
      uint64_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t i = b; i < e; ++i)
        for (int j = 0; j < 8; ++j) acc[j] ^= buf[i * 8 + j];
      part[t] = acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ acc[4] ^ acc[5] ^ acc[6] ^ acc[7];
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (uint64_t p : part) sink = sink ^ p;
    best = std::max(best, static_cast<double>(words * 8) / secs);
  }
  return best;
}

size_t dir_bytes(const std::string& dir) {
  size_t b = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) b += e.file_size();
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::string arch = "moe", dir, override_dtype = "auto", linear_backend, moe_backend;
  int64_t layers = 4, tokens = 32, prompt_len = 16;
  int threads = 2;
  bool bf16_head = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--arch") arch = val();
    else if (a == "--layers") layers = std::stoll(val());
    else if (a == "--threads") threads = std::stoi(val());
    else if (a == "--tokens") tokens = std::stoll(val());
    else if (a == "--prompt") prompt_len = std::stoll(val());
    else if (a == "--dir") dir = val();
    else if (a == "--override-activation-dtype") override_dtype = val();
    else if (a == "--bf16-lm-head") bf16_head = true;
    else if (a == "--linear-backend") linear_backend = val();
    else if (a == "--moe-backend") moe_backend = val();
    else {
      std::fprintf(stderr, "usage: decode_bench --arch moe|dense [--layers N] [--threads T] [--tokens N] [--prompt N] [--dir PATH] "
                           "[--override-activation-dtype bfloat16] [--bf16-lm-head] [--linear-backend NAME] [--moe-backend NAME]\n");
      return 2;
    }
  }
  if (prompt_len < 1 || tokens < 1) {
    std::fprintf(stderr, "--prompt and --tokens must be at least 1\n");
    return 2;
  }
  if (arch != "moe" && arch != "dense") {
    std::fprintf(stderr, "--arch must be moe or dense\n");
    return 2;
  }
  const Shapes s = arch == "moe" ? qwen3_30b_a3b() : llama3_8b();
  const bool own_dir = dir.empty();
  if (own_dir) dir = (fs::temp_directory_path() / fmt::format("fp4lm-decode-bench-{}-{}", arch, ::getpid())).string();
  try {
    auto t0 = std::chrono::steady_clock::now();
    // In a child process, so the generator's buffers never count in this process's peak RSS.
    pid_t child = ::fork();
    if (child == 0) {
      try {
        write_checkpoint(dir, s, layers, bf16_head);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "decode_bench: %s\n", e.what());
        std::_Exit(1);
      }
      std::_Exit(0);
    }
    int status = 0;
    if (child < 0 || ::waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw std::runtime_error("writing the synthetic checkpoint failed");
    const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t ckpt_bytes = dir_bytes(dir);
    std::printf("checkpoint: %s, %lld layers, %.2f GB written in %.1f s (%s)\n", s.arch.c_str(),
                static_cast<long long>(layers), ckpt_bytes / 1e9, write_s, dir.c_str());
    ThreadPool::set_global_threads(threads);
    model::EngineOptions o;
    o.dtype = "bfloat16";
    o.threads = threads;
    o.override_activation_dtype = model::parse_override_activation_dtype(override_dtype);
    o.linear_backend = linear_backend;
    o.moe_backend = moe_backend;
    model::LoadOptions lo;
    lo.max_model_len = prompt_len + tokens + 1;
    lo.progress = false;
    auto lm = model::CausalLM::load(dir, o, lo);
    model::SequenceState cache = lm->new_sequence();

    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (auto& t : prompt) t = static_cast<int32_t>(3 + next_rand() % (s.vocab - 3));
    std::vector<float> logits(static_cast<size_t>(s.vocab));
    t0 = std::chrono::steady_clock::now();
    lm->forward(cache, prompt.data(), prompt_len, model::LogitsMode::last, logits.data());
    const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<double> steps;
    int32_t tok = engine::argmax(logits.data(), s.vocab);
    for (int64_t i = 0; i < tokens; ++i) {
      auto ts = std::chrono::steady_clock::now();
      lm->forward(cache, &tok, 1, model::LogitsMode::last, logits.data());
      steps.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count());
      tok = engine::argmax(logits.data(), s.vocab);
    }
    const size_t peak_rss = engine::peak_rss_bytes();
    // The first steps warm the caches; report the median of the rest.
    std::vector<double> sorted(steps.begin() + std::min<int64_t>(4, tokens / 4), steps.end());
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    const int64_t ctx = prompt_len + tokens / 2;
    const double bytes = bytes_per_token(s, layers, bf16_head, ctx);
    const double bw = read_bandwidth(ThreadPool::global());
    const double roofline_tok_s = bw / bytes;
    const size_t kv_bytes = cache.bytes_per_position() * static_cast<size_t>(prompt_len + tokens);
    std::printf("threads %d, activations bfloat16, override %s, lm_head %s\n", threads, override_dtype.c_str(),
                bf16_head ? "bf16" : "nvfp4");
    {  // Which backends ran: the oracle's choice for this checkpoint's schemes (or the forced names).
      const kernels::QuantKey key = o.override_activation_dtype ? kernels::kNvfp4W4A16 : kernels::kNvfp4W4A4;
      const DType act = o.override_activation_dtype.value_or(DType::BF16);
      const auto lin = kernels::select_linear({key, act, s.hidden, s.hidden, {}}, "bench", linear_backend);
      const auto dense = kernels::select_linear({kernels::kUnquantized, act, s.vocab, s.hidden, {}}, "bench");
      std::printf("backends: NVFP4 Linear %s", lin.backend->name.c_str());
      if (s.experts > 0) {
        const auto moe = kernels::select_moe({key, act, s.experts, s.top_k, s.hidden, s.inter, {}}, "bench", moe_backend);
        std::printf(", NVFP4 MoE %s", moe.backend->name.c_str());
      }
      std::printf(", unquantized (router%s) %s\n", bf16_head ? ", lm_head" : "", dense.backend->name.c_str());
    }
    std::printf("prefill: %lld tokens at %.1f tok/s\n", static_cast<long long>(prompt_len), prompt_len / prefill_s);
    std::printf("decode: %.2f tok/s (median of %zu steps; %.1f ms/step)\n", 1.0 / median, sorted.size(), median * 1e3);
    std::printf("bytes/token %.1f MB, read bandwidth %.2f GB/s -> roofline %.2f tok/s; ratio to roofline %.2f\n",
                bytes / 1e6, bw / 1e9, roofline_tok_s, (1.0 / median) / roofline_tok_s);
    std::printf("peak RSS %.2f GB vs checkpoint %.2f GB + KV %.4f GB: ratio %.2f\n", peak_rss / 1e9, ckpt_bytes / 1e9,
                kv_bytes / 1e9, static_cast<double>(peak_rss) / static_cast<double>(ckpt_bytes + kv_bytes));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_bench: %s\n", e.what());
    if (own_dir) fs::remove_all(dir);
    return 1;
  }
  if (own_dir) fs::remove_all(dir);
  return 0;
}
