// The decoder-layer seam: an architecture defined in this test (registered with
// ArchRegistration, as an out-of-tree model would be) builds layers of three block shapes from
// the shared mixers — the default pre-norm block; a single-mixer layer with an extra norm after
// its attention, a per-layer input embedding, and attention that reads the K/V an earlier layer
// stored (Gemma 4's shared K/V); a pre-norm block with sliding-window attention. Its logits match
// a float64 forward written from that description, and its sequence state is what the layers
// declared: two KV slots (the sharing layer adds none), one of them a window's ring.
#include <gtest/gtest.h>

#include <cmath>

#include "common/paths.h"
#include "model/arch/arch.h"
#include "model/layers/attention.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "model/layers/mlp.h"
#include "model/load/model_loader.h"
#include "reference/tiny_models.h"

namespace fp4lm::model::decoder_layer_test {
namespace {

constexpr const char* kArch = "SeamTestForCausalLM";
constexpr int64_t kWindow = 3;  // layer 2's sliding window

std::string layer_prefix(int64_t i) { return fmt::format("model.layers.{}", i); }

// Layer 1: h += post_mixer_norm(attention(input_norm(h))) + per_layer_embed[token], its attention
// reading layer 0's K/V; no feed-forward.
class SharedKvSandwichLayer final : public DecoderLayer {
 public:
  SharedKvSandwichLayer(const LayerBuild& b, int64_t i) {
    const ModelConfig& c = b.loader.config();
    hidden_ = c.hidden_size;
    in_ = load_rms_norm(b.loader, pre_norm_names(i).input, hidden_);
    out_ = load_rms_norm(b.loader, layer_prefix(i) + ".post_mixer_norm.weight", hidden_);
    ple_ = b.loader.tensor_f32(layer_prefix(i) + ".per_layer_embed.weight", {c.vocab_size, hidden_});
    attn_ = std::make_unique<Attention>(b, i, AttentionLayout{.reads_kv_of = 0});
  }
  void forward(const LayerStep& s) const override {
    add_residual(s, in_, [&](const float* x, float* y) {
      attn_->forward(x, s.spans, y);
      out_.forward(y, s.m, y, s.act);
      for (int64_t r = 0; r < s.m; ++r)
        for (int64_t j = 0; j < hidden_; ++j) y[r * hidden_ + j] += ple_[s.tokens[r] * hidden_ + j];
    });
  }
  size_t own_param_bytes() const override {
    return (static_cast<size_t>(2 * hidden_) + ple_.size()) * sizeof(float) + attn_->own_param_bytes();
  }

 private:
  int64_t hidden_ = 0;
  RmsNorm in_, out_;
  std::vector<float> ple_;
  std::unique_ptr<Attention> attn_;
};

class SeamTestArch final : public ArchDef {
 public:
  std::string_view hf_name() const override { return kArch; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override { read_dense_mlp_keys(r, c); }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    if (i != 1) plan_dense_mlp(c, i, layer_prefix(i) + ".mlp", c.intermediate_size, out);
  }
  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    if (i != 1) return ArchDef::layer_params(c, i);
    return {{pre_norm_names(i).input, {c.hidden_size}},
            {layer_prefix(i) + ".post_mixer_norm.weight", {c.hidden_size}},
            {layer_prefix(i) + ".per_layer_embed.weight", {c.vocab_size, c.hidden_size}}};
  }
  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    if (i == 1) return std::make_unique<SharedKvSandwichLayer>(b, i);
    return ArchDef::make_layer(b, i);
  }
  std::unique_ptr<Mixer> make_mixer(const LayerBuild& b, int64_t i) const override {
    return std::make_unique<Attention>(b, i, AttentionLayout{.window = i == 2 ? kWindow : 0});
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return std::make_unique<DenseMlp>(l, layer_prefix(i) + ".mlp");
  }
  void synthetic_config(const model::SampleShape&, nlohmann::json&) const override {}
};

// The tiny Llama's weights (3 layers, GQA, llama3 RoPE, tied embeddings) under the test
// architecture: layer 1 loses its MLP and post-attention norm and gains its own tensors.
test::TinyModel seam_model() {
  test::TinyModel m = test::make_tiny_model("LlamaForCausalLM", 11);
  m.config["architectures"] = {kArch};
  const int64_t hidden = m.config["hidden_size"], vocab = m.config["vocab_size"];
  for (const char* t : {".mlp.gate_proj.weight", ".mlp.up_proj.weight", ".mlp.down_proj.weight",
                        ".post_attention_layernorm.weight"})
    m.w.erase(layer_prefix(1) + t);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  test::TinyTensor norm{{hidden}, {}}, ple{{vocab, hidden}, {}};
  for (int64_t j = 0; j < hidden; ++j) norm.v.push_back(1.0f + 0.2f * d(rng));
  for (int64_t j = 0; j < vocab * hidden; ++j) ple.v.push_back(0.3f * d(rng));
  m.w[layer_prefix(1) + ".post_mixer_norm.weight"] = norm;
  m.w[layer_prefix(1) + ".per_layer_embed.weight"] = ple;
  return m;
}

// float64 forward of the test architecture, from the description above.
std::vector<test::naive::Vec> reference(const test::TinyModel& m, const std::vector<int32_t>& tokens) {
  using Vec = test::naive::Vec;
  namespace nv = test::naive;
  const auto& c = m.config;
  const auto& w = m.w;
  const int64_t hidden = c["hidden_size"], heads = c["num_attention_heads"], kvh = c["num_key_value_heads"];
  const int64_t hd = c["head_dim"];
  const double eps = c["rms_norm_eps"];
  const Vec f = nv::inv_freq(c, hd);
  const size_t n = tokens.size();
  auto wp = [&](const std::string& name) { return w.at(name).v.data(); };
  std::vector<Vec> h(n);
  for (size_t t = 0; t < n; ++t) {
    const float* e = wp("model.embed_tokens.weight") + tokens[t] * hidden;
    h[t] = Vec(e, e + hidden);
  }
  std::vector<Vec> k0(n), v0(n);  // layer 0's K/V (after RoPE), which layer 1 reads
  for (int64_t l = 0; l < 3; ++l) {
    const std::string p = layer_prefix(l);
    std::vector<Vec> q(n), k(n), v(n), x(n);
    for (size_t t = 0; t < n; ++t) {
      x[t] = nv::rms_norm(h[t], wp(p + ".input_layernorm.weight"), 0, hidden, eps);
      q[t] = nv::matvec(w.at(p + ".self_attn.q_proj.weight"), x[t]);
      k[t] = nv::matvec(w.at(p + ".self_attn.k_proj.weight"), x[t]);
      v[t] = nv::matvec(w.at(p + ".self_attn.v_proj.weight"), x[t]);
      for (int64_t hh = 0; hh < heads; ++hh) nv::rope(q[t].data() + hh * hd, hd, static_cast<int64_t>(t), f);
      for (int64_t hh = 0; hh < kvh; ++hh) nv::rope(k[t].data() + hh * hd, hd, static_cast<int64_t>(t), f);
    }
    if (l == 0) k0 = k, v0 = v;
    const std::vector<Vec>& keys = l == 1 ? k0 : k;
    const std::vector<Vec>& values = l == 1 ? v0 : v;
    const size_t window = l == 2 ? static_cast<size_t>(kWindow) : n;
    for (size_t t = 0; t < n; ++t) {
      const size_t lo = t + 1 > window ? t + 1 - window : 0;
      Vec attn(static_cast<size_t>(heads * hd), 0.0);
      for (int64_t hh = 0; hh < heads; ++hh) {
        const int64_t g = hh / (heads / kvh);
        Vec s(t + 1, 0.0);
        double mx = -1e300, sum = 0;
        for (size_t u = lo; u <= t; ++u) {
          double dot = 0;
          for (int64_t i = 0; i < hd; ++i) dot += q[t][hh * hd + i] * keys[u][g * hd + i];
          s[u] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[u]);
        }
        for (size_t u = lo; u <= t; ++u) sum += s[u] = std::exp(s[u] - mx);
        for (size_t u = lo; u <= t; ++u)
          for (int64_t i = 0; i < hd; ++i) attn[hh * hd + i] += s[u] / sum * values[u][g * hd + i];
      }
      Vec o = nv::matvec(w.at(p + ".self_attn.o_proj.weight"), attn);
      if (l == 1) {
        o = nv::rms_norm(o, wp(p + ".post_mixer_norm.weight"), 0, hidden, eps);
        for (int64_t i = 0; i < hidden; ++i) o[i] += wp(p + ".per_layer_embed.weight")[tokens[t] * hidden + i];
      }
      for (int64_t i = 0; i < hidden; ++i) h[t][i] += o[i];
    }
    if (l == 1) continue;
    for (size_t t = 0; t < n; ++t) {
      const Vec xm = nv::rms_norm(h[t], wp(p + ".post_attention_layernorm.weight"), 0, hidden, eps);
      const Vec y = nv::swiglu(w, p + ".mlp.gate_proj", p + ".mlp.up_proj", p + ".mlp.down_proj", xm);
      for (int64_t i = 0; i < hidden; ++i) h[t][i] += y[i];
    }
  }
  std::vector<Vec> logits(n);
  for (size_t t = 0; t < n; ++t)
    logits[t] = nv::matvec(w.at("model.embed_tokens.weight"), nv::rms_norm(h[t], wp("model.norm.weight"), 0, hidden, eps));
  return logits;
}

TEST(DecoderLayerSeam, ArchitectureBuildsItsOwnBlockShapes) {
  static const SeamTestArch arch;
  const ArchRegistration registration(arch);
  test::TempDir dir;
  const test::TinyModel m = seam_model();
  test::write_tiny_model(m, dir.path());
  EngineOptions o;
  o.dtype = "float32";
  LoadOptions lo;
  lo.prefill_chunk = 4;
  auto lm = CausalLM::load(dir.path().string(), o, lo);

  // Declared state: layer 0's full slot and layer 2's window; layer 1 shares layer 0's.
  const StateLayout& st = lm->state_layout();
  ASSERT_EQ(st.kv_slots().size(), 2u);
  EXPECT_EQ(st.kv_slots()[0].window, 0);
  EXPECT_EQ(st.kv_slots()[1].window, kWindow);
  EXPECT_EQ(st.kv_slot_of_layer(0), 0);
  EXPECT_EQ(st.kv_slot_of_layer(2), 1);
  EXPECT_TRUE(st.recurrent_slots().empty());
  const size_t per_row = 2 * 2 * 8 * sizeof(float);  // (K, V) × 2 KV heads × head_dim 8, float32
  EXPECT_EQ(lm->sequence_bytes(50), per_row * (50 + (kWindow - 1 + 4)));

  std::vector<int32_t> tokens;
  for (int32_t t = 0; t < 14; ++t) tokens.push_back((t * 29 + 3) % 97);
  const auto want = reference(m, tokens);
  // One prefill of the whole sequence in steps of 4, and 9 + decode steps: both the reference's.
  EXPECT_LT(max_rel_diff(all_logits(*lm, tokens), want), 2e-5);
  const int64_t vocab = lm->vocab_size();
  SequenceState s = lm->new_sequence(50);
  std::vector<float> got(tokens.size() * static_cast<size_t>(vocab));
  lm->forward(s, tokens.data(), 9, LogitsMode::all, got.data());
  for (size_t t = 9; t < tokens.size(); ++t)
    lm->forward(s, &tokens[t], 1, LogitsMode::last, got.data() + t * static_cast<size_t>(vocab));
  EXPECT_LT(max_rel_diff(got, want), 2e-5);
  EXPECT_EQ(s.reserved_bytes(), per_row * (50 + (kWindow - 1 + 4)));
}

// A layer that asks for the K/V of a layer that stored none fails the load, naming the layer.
TEST(DecoderLayerSeam, SharingKvOfALayerWithoutOneFails) {
  StateLayout st;
  st.add_kv(0, {2, 4});
  EXPECT_EQ(st.kv_slot_of_layer(0), 0);
  try {
    st.kv_slot_of_layer(1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decoder layer 1 stored no K/V"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4lm::model::decoder_layer_test
