#pragma once
// Rotary position embedding in the HF "rotate-half" convention: a head's dimension i pairs with
// i + head_dim/2. Frequencies follow HF (float32 inv_freq = 1 / theta^(2i/d)), with the
// "linear" (positions / factor), "llama3" (band-wise wavelength scaling) and "yarn" (a ramp
// between interpolated and extrapolated frequencies, cos/sin scaled by its attention_factor)
// and "longrope" (Phi-3: per-frequency short / long divisors, cos/sin × attention_factor)
// rope_scaling types.
#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace fp4lm::model {

class Rope {
 public:
  Rope() = default;
  Rope(int64_t head_dim, double theta, const RopeScaling& scaling);

  int64_t head_dim() const { return head_dim_; }
  // head_dim/2 inverse frequencies after scaling.
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // The factor cos and sin are multiplied by (yarn's attention_factor; 1 otherwise).
  float attention_scaling() const { return attention_scaling_; }

  // LongRoPE: whether a forward call whose sequence reaches seq_len positions uses the long
  // factors. As transformers (longrope_frequency_update): all the call's rows do when seq_len
  // exceeds original_max_position_embeddings, else none; K/V cached by earlier calls keep the
  // rotation they were stored with. The call is CausalLM::forward's chunk of that sequence, however
  // many prefill_chunk steps it runs in (SequenceSpan::chunk_end). Always false for other types.
  bool long_factors(int64_t seq_len) const { return !long_inv_freq_.empty() && seq_len > long_after_; }

  // cos/sin of angle pos * inv_freq[i], head_dim/2 values each (LongRoPE's long frequencies when
  // `long_factors`).
  void cos_sin(int64_t pos, float* cos, float* sin, bool long_factors = false) const;
  // Qwen's multimodal RoPE (mrope_section, model_config.h): frequency pair i rotates by one of a
  // token's three positions (t, h, w). Interleaved (Qwen3-VL / Qwen3.5, transformers'
  // recomposition_frequencies): h when i % 3 == 1 and i < 3·section[1], w when i % 3 == 2 and
  // i < 3·section[2], else t. Contiguous (Qwen2-VL): the first section[0] pairs t, the next
  // section[1] h, the rest w. A text token's three positions are equal: plain cos_sin.
  void set_mrope(std::vector<int64_t> section, bool interleaved);
  bool has_mrope() const { return !mrope_section_.empty(); }
  // cos/sin of pair i at angle thw[axis(i)] * inv_freq[i] (thw: the token's t, h, w positions).
  void cos_sin_3d(const int64_t* thw, float* cos, float* sin) const;
  // Rotates n_heads consecutive heads of x (head_dim values each) by the angles in cos/sin:
  // x[i] <- x[i]·cos[i] − x[i+h]·sin[i], x[i+h] <- x[i+h]·cos[i] + x[i]·sin[i], h = head_dim/2.
  // `stride` (0 = head_dim) is the distance between heads: partial RoPE (Qwen3.5) rotates the
  // first head_dim() dims of heads `stride` apart and leaves the rest.
  void rotate(float* x, int64_t n_heads, const float* cos, const float* sin, int64_t stride = 0) const;

 private:
  int64_t head_dim_ = 0;
  std::vector<float> inv_freq_;
  std::vector<float> long_inv_freq_;  // LongRoPE only
  int64_t long_after_ = 0;            // LongRoPE: original_max_position_embeddings
  float attention_scaling_ = 1.0f;
  std::vector<int64_t> mrope_section_;
  std::vector<uint8_t> mrope_axis_;  // per frequency pair: 0 t, 1 h, 2 w
};

// YaRN's magnitude correction 0.1·mscale·ln(scale) + 1 (1 for scale <= 1), as HF's
// yarn_get_mscale: DeepSeek's softmax scale is multiplied by its square (mscale_all_dim).
double yarn_mscale(double scale, double mscale);

}  // namespace fp4lm::model
