#include "model/causal_lm.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "model/activation.h"
#include "model/arch/arch.h"
#include "model/model_loader.h"

namespace fp4lm::model {

CausalLM::~CausalLM() = default;

const ModelConfig& CausalLM::config() const { return loader_->config(); }

std::unique_ptr<CausalLM> CausalLM::load(const std::string& dir, const EngineOptions& opts, const LoadOptions& lo) {
  return load(io::Checkpoint::open(dir), opts, lo);
}

std::unique_ptr<CausalLM> CausalLM::load(std::shared_ptr<io::Checkpoint> ckpt, const EngineOptions& opts,
                                         const LoadOptions& lo) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<CausalLM> lm(new CausalLM());
  lm->ckpt_ = ckpt;
  lm->loader_ = std::make_unique<ModelLoader>(ckpt, opts);
  ModelLoader& l = *lm->loader_;
  const ModelConfig& c = l.config();
  const std::string cfg_path = ckpt->dir() + "/config.json";
  lm->dtype_ = l.dtype();
  if (lo.prefill_chunk <= 0) fail("prefill chunk must be positive, got {}", lo.prefill_chunk);
  lm->prefill_chunk_ = lo.prefill_chunk;
  if (lo.max_model_len < 0) usage_fail("--max-model-len must be positive (got {})", lo.max_model_len);
  if (lo.max_model_len > c.max_position_embeddings)
    usage_fail("--max-model-len {} exceeds the model's max_position_embeddings {} ({})", lo.max_model_len,
               c.max_position_embeddings, cfg_path);
  lm->max_model_len_ = lo.max_model_len > 0 ? lo.max_model_len : std::min<int64_t>(c.max_position_embeddings, 8192);

  lm->eos_ids_ = c.eos_token_ids;
  if (const auto& g = ckpt->generation_config(); g && g->is_object() && g->contains("eos_token_id")) {
    const auto& e = (*g)["eos_token_id"];
    if (e.is_number_integer()) lm->eos_ids_.push_back(e.get<int64_t>());
    else if (e.is_array())
      for (const auto& v : e)
        if (v.is_number_integer()) lm->eos_ids_.push_back(v.get<int64_t>());
  }
  std::sort(lm->eos_ids_.begin(), lm->eos_ids_.end());
  lm->eos_ids_.erase(std::unique(lm->eos_ids_.begin(), lm->eos_ids_.end()), lm->eos_ids_.end());

  lm->rope_ = Rope(c.head_dim, c.rope_theta, c.rope_scaling);
  lm->embed_ = Embedding(l.tensor("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}));
  const ArchDef& arch = arch_def(c.arch);
  const bool bar = lo.progress && ::isatty(STDERR_FILENO);
  lm->layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (bar) std::fprintf(stderr, "\rloading layers %lld/%lld", static_cast<long long>(i + 1),
                          static_cast<long long>(c.num_layers));
    Layer& L = lm->layers_[i];
    const std::string p = fmt::format("model.layers.{}", i);
    L.input_norm = RmsNorm(l.tensor_f32(p + ".input_layernorm.weight", {c.hidden_size}), c.rms_norm_eps);
    L.post_norm = RmsNorm(l.tensor_f32(p + ".post_attention_layernorm.weight", {c.hidden_size}), c.rms_norm_eps);
    L.attn = std::make_unique<Attention>(l, i, lm->rope_);
    L.ffn = arch.make_ffn(l, i);
  }
  if (bar) std::fprintf(stderr, "\r\033[K");
  lm->final_norm_ = RmsNorm(l.tensor_f32("model.norm.weight", {c.hidden_size}), c.rms_norm_eps);
  lm->lm_head_ = l.load_linear("lm_head");
  lm->load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log().info("Loaded {} ({} layers, {} activations) from {} in {:.2f} s; resident weight bytes {} ({:.1f} MiB)",
             c.architecture, c.num_layers, dtype_torch_name(lm->dtype_), ckpt->dir(), lm->load_seconds_,
             lm->weight_bytes(), static_cast<double>(lm->weight_bytes()) / (1 << 20));
  return lm;
}

size_t CausalLM::weight_bytes() const {
  const ModelConfig& c = config();
  size_t b = loader_->loaded_weight_bytes();
  // Norms are copied to float32; the embedding table stays mapped in its own dtype.
  b += static_cast<size_t>(c.hidden_size) * sizeof(float) * (2 * layers_.size() + 1);
  if (c.qk_norm) b += static_cast<size_t>(c.head_dim) * sizeof(float) * 2 * layers_.size();
  if (!c.tie_word_embeddings) b += loader_->checkpoint().get("model.embed_tokens.weight").nbytes;
  return b;
}

KvCache CausalLM::new_cache(int64_t capacity) const {
  const ModelConfig& c = config();
  return KvCache(c.num_layers, c.num_kv_heads, c.head_dim, capacity > 0 ? capacity : max_model_len_, dtype_);
}

void CausalLM::forward(KvCache& cache, const int32_t* tokens, int64_t n, LogitsMode mode, float* logits) const {
  if (n <= 0) fail("forward: no tokens");
  if (cache.length() + n > cache.capacity())
    fail("sequence of {} tokens exceeds the maximum model length {} (--max-model-len)", cache.length() + n,
         cache.capacity());
  const int64_t vocab = vocab_size();
  for (int64_t s = 0; s < n; s += prefill_chunk_) {
    const int64_t m = std::min(prefill_chunk_, n - s);
    const bool last_chunk = s + m == n;
    LogitsMode cm = mode == LogitsMode::all ? LogitsMode::all : (last_chunk ? mode : LogitsMode::none);
    forward_chunk(cache, tokens + s, m, cm, mode == LogitsMode::all ? logits + s * vocab : logits);
  }
}

void CausalLM::forward_chunk(KvCache& cache, const int32_t* tokens, int64_t m, LogitsMode mode,
                             float* logits) const {
  const int64_t hid = config().hidden_size, pos0 = cache.length();
  const size_t size = static_cast<size_t>(m * hid);
  std::vector<float> h(size), x(size), y(size);
  embed_.lookup(tokens, m, h.data());
  round_to_dtype(h.data(), size, dtype_);
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& L = layers_[li];
    L.input_norm.forward(h.data(), m, x.data(), dtype_);
    L.attn->forward(x.data(), m, pos0, cache, y.data());
    for (size_t i = 0; i < size; ++i) h[i] += y[i];
    round_to_dtype(h.data(), size, dtype_);
    L.post_norm.forward(h.data(), m, x.data(), dtype_);
    L.ffn->forward(x.data(), m, y.data());
    for (size_t i = 0; i < size; ++i) h[i] += y[i];
    round_to_dtype(h.data(), size, dtype_);
  }
  cache.set_length(pos0 + m);
  if (mode == LogitsMode::none) return;
  const int64_t first = mode == LogitsMode::last ? m - 1 : 0, rows = m - first;
  final_norm_.forward(h.data() + first * hid, rows, x.data(), dtype_);
  lm_head_->forward(x.data(), rows, logits);
}

}  // namespace fp4lm::model
