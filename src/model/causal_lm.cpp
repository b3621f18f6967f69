#include "model/causal_lm.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "model/layers/activation.h"
#include "kernels/a16_scope.h"
#include "model/arch/arch.h"
#include "model/load/finite_check.h"
#include "model/state/kv_cache_format.h"
#include "model/state/state_bytes.h"
#include "model/load/memory_fit.h"
#include "model/load/model_loader.h"
#include "quant/modelopt_config.h"

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
  lm->a16_max_tokens_ = opts.a16_max_tokens;
  const KvCacheFormat kv = resolve_kv_cache_format(l.quant_config().kv_cache_scheme(), opts.kv_cache_dtype, lm->dtype_,
                                                   l.quant_config().source());
  lm->kv_dtype_ = kv.dtype;
  lm->kv_quant_ = kv.quant;
  lm->state_.set_kv_quant(kv.quant);
  if (lo.prefill_chunk <= 0) fail("prefill chunk must be positive, got {}", lo.prefill_chunk);
  lm->prefill_chunk_ = lo.prefill_chunk;
  if (lo.max_model_len < 0) usage_fail("max_model_len must be positive (got {})", lo.max_model_len);
  if (lo.max_model_len > c.max_position_embeddings)
    usage_fail("max_model_len {} exceeds the model's max_position_embeddings {} ({})", lo.max_model_len,
               c.max_position_embeddings, cfg_path);
  lm->max_model_len_ = lo.max_model_len > 0 ? lo.max_model_len : std::min<int64_t>(c.max_position_embeddings, 8192);

  const int64_t end = lo.end_layer < 0 ? c.num_layers : lo.end_layer;
  if (lo.first_layer < 0 || lo.first_layer >= end || end > c.num_layers)
    fail("pipeline stage: decoder layers [{}, {}) outside the model's {} layers ({})", lo.first_layer, end,
         c.num_layers, cfg_path);
  // Fail before mapping anything when the weights cannot fit (they would page from disk per token).
  // A pipeline stage counts its own layers (and the embedding / final norm / lm_head when it is
  // the first or the last stage).
  check_weights_fit(ckpt->dir(),
                    stage_weight_bytes(*ckpt, c.wrapper_prefix + c.tensor_prefix, lo.first_layer, end,
                                       lo.first_layer == 0 || end == c.num_layers),
                    lo.ram_bytes > 0 ? lo.ram_bytes : physical_ram_bytes());

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

  lm->rope_ = Rope(c.rotary_dim, c.rope_theta, c.rope_scaling);
  lm->rope_.set_mrope(c.mrope_section, c.mrope_interleaved);
  lm->first_layer_ = lo.first_layer;
  if (lo.first_layer == 0)
    lm->embed_ = Embedding(l.tensor("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}));
  const ArchDef& arch = *c.arch;
  const bool bar = lo.progress && ::isatty(STDERR_FILENO);
  // K/V shared across the stage's cuts (Gemma 4's num_kv_shared_layers): the stage before sends
  // what this stage's layers or later ones read; this stage sends on what later ones read.
  lm->stage_kv_ = StageKv(kv_read_across(c, lo.first_layer), end < c.num_layers ? kv_read_across(c, end)
                                                                                 : std::vector<int64_t>{},
                          lo.first_layer);
  for (const int64_t j : lm->stage_kv_.received()) lm->state_.expect_kv_from_earlier_stage(j);
  const LayerBuild build{l, lm->rope_, lm->state_, lm->kv_dtype_};
  for (int64_t i = lo.first_layer; i < end; ++i) {
    if (bar) std::fprintf(stderr, "\rloading layers %lld/%lld", static_cast<long long>(i + 1),
                          static_cast<long long>(c.num_layers));
    lm->layers_.push_back(arch.make_layer(build, i));
  }
  if (bar) std::fprintf(stderr, "\r\033[K");
  if (const int64_t missing = lm->state_.missing_kv_scales(); missing > 0)
    log().warn("{}: kv_cache_dtype fp8 but {} of {} k_scale/v_scale tensors are absent; using scale 1.0 for them",
               ckpt->dir(), missing, 2 * lm->state_.kv_slots().size());
  bool final_norm = true;
  if (auto head = arch.load_hyper_head(l)) {
    lm->residual_streams_ = head->streams();
    final_norm = head->final_norm();
    if (end == c.num_layers) lm->hyper_head_ = std::move(head);
  }
  if (end == c.num_layers) {
    if (final_norm) lm->final_norm_ = load_rms_norm(l, "model.norm.weight", c.hidden_size);
    lm->lm_head_ = l.load_linear("lm_head");
  }
  if (lo.mtp) {
    if (lo.first_layer != 0 || end != c.num_layers)
      fail("speculative method 'mtp': the MTP head runs only in a whole model, not in a pipeline stage");
    lm->mtp_ = std::make_unique<MtpHead>(l, lm->rope_, lm->kv_dtype_, lm->kv_quant_);
    log().info("Loaded the MTP head ({} of {} MTP layer(s); the draft model of speculative decoding)", 1,
               c.num_nextn_predict_layers);
  }
  // The vision tower, when the architecture has one and the checkpoint stores it (whole models
  // only): the one place the engine obtains it (model/image_encoder.h).
  if (lo.first_layer == 0 && end == c.num_layers) lm->image_encoder_ = arch.load_image_encoder(l);
  if (lo.first_layer == 0 && end == c.num_layers) {
    const auto* mo = dynamic_cast<const quant::ModeloptConfig*>(&l.quant_config());
    if (l.pre_quant_scaled_layers() > 0)
      log().info("AWQ pre_quant_scale applied on {} Linear layer(s)", l.pre_quant_scaled_layers());
    else if (mo && (mo->pre_quant_scale || mo->algo == quant::QuantAlgo::NVFP4_AWQ))
      log().warn("{}: declares AWQ pre_quant_scale ({}), but no Linear layer stores a pre_quant_scale tensor (each "
                 "was folded into the layer before it at export, or the tensors are missing)",
                 mo->source_path, mo->algo == quant::QuantAlgo::NVFP4_AWQ ? "quant_algo NVFP4_AWQ" : "pre_quant_scale: true");
    lm->tensor_usage_ = model::tensor_usage(*ckpt, c, lm->kv_dtype_ == DType::F8_E4M3 || lm->kv_quant_ != KvQuant::none,
                                           lm->mtp_ != nullptr);
    if (lo.enforce_tensor_usage) enforce_tensor_usage(*ckpt, lm->tensor_usage_);
  }
  lm->load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log().info("Loaded {} ({} layers, {} activations, {} KV cache: {} bytes per token) from {} in {:.2f} s; resident "
             "weight bytes {} ({:.1f} MiB)",
             c.architecture, c.num_layers, dtype_torch_name(lm->dtype_), lm->kv_format_name(),
             state_bytes_per_position(lm->state_, lm->kv_dtype_), ckpt->dir(), lm->load_seconds_,
             lm->weight_bytes(), static_cast<double>(lm->weight_bytes()) / (1 << 20));
  return lm;
}

std::string CausalLM::kv_format_name() const { return kv_cache_format_name({kv_dtype_, kv_quant_}); }

size_t CausalLM::weight_bytes() const {
  const ModelConfig& c = config();
  size_t b = loader_->loaded_weight_bytes();
  // Norms are copied to float32; the embedding table stays mapped in its own dtype.
  b += static_cast<size_t>(final_norm_.dim()) * sizeof(float);
  for (const auto& layer : layers_) b += layer->own_param_bytes();
  if (mtp_) b += mtp_->own_param_bytes();
  if (hyper_head_) b += hyper_head_->param_bytes();
  // (A tied table is lm_head's, already counted when this object holds lm_head.)
  if (has_embedding() && (!c.tie_word_embeddings || !has_lm_head()))
    b += loader_->checkpoint().get("model.embed_tokens.weight").nbytes;
  return b;
}

SequenceState CausalLM::new_sequence(int64_t capacity, int64_t id) const {
  if (capacity < 0 || capacity > max_model_len_)
    fail("sequence capacity {} outside [1, {}] (max_model_len)", capacity, max_model_len_);
  return SequenceState(state_.new_kv_cache(capacity > 0 ? capacity : max_model_len_, prefill_chunk_, kv_dtype_), id,
                       state_.recurrent_slots(), state_.recurrent_replays());
}

size_t CausalLM::sequence_bytes(int64_t capacity) const {
  return state_.sequence_bytes(capacity > 0 ? capacity : max_model_len_, prefill_chunk_, kv_dtype_) +
         (mtp_ ? mtp_sequence_bytes(capacity) : 0);
}

SequenceState CausalLM::new_mtp_sequence(int64_t capacity, int64_t id) const {
  if (!mtp_) fail("the model was loaded without its MTP head");
  if (capacity < 0 || capacity > max_model_len_)
    fail("sequence capacity {} outside [1, {}] (max_model_len)", capacity, max_model_len_);
  const StateLayout& s = mtp_->state_layout();
  return SequenceState(s.new_kv_cache(capacity > 0 ? capacity : max_model_len_, prefill_chunk_, kv_dtype_), id);
}

size_t CausalLM::mtp_sequence_bytes(int64_t capacity) const {
  if (!mtp_) return 0;
  return mtp_->state_layout().sequence_bytes(capacity > 0 ? capacity : max_model_len_, prefill_chunk_, kv_dtype_);
}

void CausalLM::mtp_forward(SequenceState& st, const int32_t* tokens, const float* hidden, int64_t n, float* logits,
                           float* out_hidden) const {
  const MtpRows r{&st, tokens, hidden, n, logits, out_hidden};
  mtp_forward(std::span<const MtpRows>(&r, 1));
}

void CausalLM::mtp_forward(std::span<const MtpRows> batch) const {
  if (!mtp_) fail("the model was loaded without its MTP head");
  std::vector<int64_t> lengths;
  for (const MtpRows& r : batch) {
    if (r.n <= 0 || !r.state || !r.tokens || !r.hidden) fail("mtp_forward: an entry without rows");
    if (r.state->length() + r.n > r.state->capacity())
      fail("MTP head: sequence of {} positions exceeds its capacity {}", r.state->length() + r.n, r.state->capacity());
    lengths.push_back(r.state->length());
  }
  try {
    // Groups of whole entries within prefill_chunk rows; a longer entry alone, in pieces.
    size_t b = 0;
    while (b < batch.size()) {
      if (batch[b].n > prefill_chunk_) {
        for (int64_t r0 = 0; r0 < batch[b].n; r0 += prefill_chunk_)
          mtp_step(batch.subspan(b, 1), r0, std::min(prefill_chunk_, batch[b].n - r0));
        ++b;
        continue;
      }
      size_t e = b;
      for (int64_t rows = 0; e < batch.size() && batch[e].n <= prefill_chunk_ - rows; ++e) rows += batch[e].n;
      mtp_step(batch.subspan(b, e - b), 0, -1);
      b = e;
    }
  } catch (...) {
    for (size_t i = 0; i < batch.size(); ++i) batch[i].state->abandon_forward(lengths[i]);
    throw;
  }
}

void CausalLM::mtp_step(std::span<const MtpRows> batch, int64_t r0, int64_t m_one) const {
  const int64_t hid = config().hidden_size;
  std::vector<SequenceSpan> spans;
  std::vector<int32_t> tokens;
  std::vector<float> h;
  int64_t m = 0;
  for (const MtpRows& r : batch) {
    const int64_t take = m_one < 0 ? r.n : m_one, from = m_one < 0 ? 0 : r0;
    spans.push_back({r.state, m, take, r.state->length()});
    tokens.insert(tokens.end(), r.tokens + from, r.tokens + from + take);
    h.insert(h.end(), r.hidden + from * hid, r.hidden + (from + take) * hid);
    m += take;
  }
  const size_t size = static_cast<size_t>(m * hid);
  std::vector<float> e(size), g(size);
  embed_.lookup(tokens.data(), m, e.data());
  round_to_dtype(e.data(), size, dtype_);
  mtp_->forward(e.data(), h.data(), m, spans, tokens.data(), g.data());
  check_finite(g.data(), m, hid, "the MTP head's output");
  // Logits of each entry's last row (when this step holds it), in one lm_head call.
  std::vector<float> last;
  std::vector<float*> outs;
  for (size_t i = 0; i < batch.size(); ++i) {
    const MtpRows& r = batch[i];
    const SequenceSpan& sp = spans[i];
    sp.state->kv().set_length(sp.pos0 + sp.n);
    if (r.out_hidden) std::copy_n(g.data() + sp.row0 * hid, sp.n * hid, r.out_hidden + (m_one < 0 ? 0 : r0) * hid);
    if (!r.logits || (m_one >= 0 && r0 + m_one < r.n)) continue;
    last.insert(last.end(), g.data() + (sp.row0 + sp.n - 1) * hid, g.data() + (sp.row0 + sp.n) * hid);
    outs.push_back(r.logits);
  }
  if (outs.empty()) return;
  const int64_t rows = static_cast<int64_t>(outs.size()), vocab = vocab_size();
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  lm_head_->forward(last.data(), rows, logits.data());
  check_finite(logits.data(), rows, vocab, "the MTP head's logits");
  for (int64_t i = 0; i < rows; ++i) std::copy_n(logits.data() + i * vocab, vocab, outs[static_cast<size_t>(i)]);
}

// Rows [offset, offset + n) of batch chunk `chunk`, at positions pos0.. of its state, are rows
// [row0, row0 + n) of the step.
struct CausalLM::Piece {
  int64_t chunk, offset, n, row0, pos0;
};

namespace {
// Fills in the batch entry and position of a non-finite value found at `row` of a step.
template <typename Find>
[[noreturn]] void rethrow_located(const NonFiniteError& e, int64_t row, Find&& find) {
  const auto [batch_index, position, id] = find(row);
  throw NonFiniteError(e.where(), e.row(), e.value(), batch_index, position, id);
}
}  // namespace

void CausalLM::forward(SequenceState& state, const int32_t* tokens, int64_t n, LogitsMode mode, float* logits) const {
  const SequenceChunk c{&state, tokens, n, mode, logits};
  forward(std::span<const SequenceChunk>(&c, 1));
}

void CausalLM::forward(std::span<const SequenceChunk> batch, StageLink* link) const {
  if (!link && (!has_embedding() || !has_lm_head()))
    fail("forward: a pipeline stage (decoder layers [{}, {})) runs only with its neighbours", first_layer_,
         end_layer());
  for (size_t b = 0; b < batch.size(); ++b) {
    const SequenceChunk& c = batch[b];
    if (!c.state) fail("forward: batch entry {} has no sequence state", b);
    if (c.n <= 0 || !c.tokens) fail("forward: batch entry {} has no tokens", b);
    if (c.logits != LogitsMode::none && !c.out) fail("forward: batch entry {} asks for logits but has no output", b);
    if (c.state->lost())
      fail("forward: sequence {} lost its sliding-window K/V in a failed forward; clear it first", c.state->id());
    if (c.state->length() + c.n > c.state->capacity())
      fail("sequence of {} tokens exceeds the maximum model length {} (max_model_len)", c.state->length() + c.n,
           c.state->capacity());
    for (size_t o = 0; o < b; ++o)
      if (batch[o].state == c.state) fail("forward: batch entries {} and {} are the same sequence", o, b);
    if (c.bidir_end)
      for (int64_t i = 0; i < c.n; ++i)
        if (c.bidir_end[i] >= c.state->length() + c.n)
          fail("forward: batch entry {} ends at position {} inside an image block that continues to position {}: "
               "its tokens attend to each other both ways, so a chunk must hold the block to its end",
               b, c.state->length() + c.n - 1, c.bidir_end[i]);
  }
  std::vector<int64_t> lengths;
  for (const SequenceChunk& c : batch) {
    lengths.push_back(c.state->length());
    c.state->begin_forward(c.rewindable);
  }
  try {
    // Steps of at most prefill_chunk rows; a long chunk continues in the next one. When a mixer
    // runs a sequence's rows in blocks aligned to positions (StateLayout::align_rows, e.g. the
    // gated delta-net's chunked form), a chunk is cut only at such a position (multiples of
    // prefill_chunk when smaller), so its blocks, and its results, do not depend on what else
    // shares the step.
    const int64_t grid = std::min(state_.row_alignment(), prefill_chunk_);
    auto run = [&](auto take_chunk) {
      std::vector<Piece> pieces;
      int64_t rows = 0;
      for (size_t b = 0; b < batch.size(); ++b) {
        if (!take_chunk(batch[b])) continue;
        for (int64_t off = 0; off < batch[b].n;) {
          int64_t take = std::min(batch[b].n - off, prefill_chunk_ - rows);
          if (take < batch[b].n - off && grid > 1) {
            const int64_t pos = lengths[b] + off;
            const int64_t aligned = (pos + take) / grid * grid - pos;
            if (aligned <= 0 && rows > 0) {  // no aligned cut fits: the rest goes to a fresh step
              forward_step(batch, pieces, link);
              pieces.clear();
              rows = 0;
              continue;
            }
            if (aligned > 0) take = aligned;  // (a fresh step always has one: prefill_chunk >= grid)
          }
          if (take < batch[b].n - off && batch[b].bidir_end) {
            // Never cut inside an image block (its rows read every key of the block): the cut
            // moves back to the block's start, or the block goes whole to a fresh step.
            const int64_t* be = batch[b].bidir_end + off;
            const int64_t pos = lengths[b] + off;
            int64_t cut = take;
            while (cut > 0 && be[cut - 1] >= pos + take) --cut;
            if (cut == 0 && rows > 0) {
              forward_step(batch, pieces, link);
              pieces.clear();
              rows = 0;
              continue;
            }
            if (cut == 0)
              fail("forward: the image block at position {} is {} tokens, more than one forward step of {} rows "
                   "(prefill_chunk) holds; its tokens attend to each other both ways",
                   pos, be[0] - pos + 1, prefill_chunk_);
            take = cut;
          }
          pieces.push_back({static_cast<int64_t>(b), off, take, rows, 0});
          rows += take;
          off += take;
          if (rows == prefill_chunk_) {
            forward_step(batch, pieces, link);
            pieces.clear();
            rows = 0;
          }
        }
      }
      if (!pieces.empty()) forward_step(batch, pieces, link);
    };
    if (a16_max_tokens_ <= 0) {
      run([](const SequenceChunk&) { return true; });
    } else {
      // --a16-max-tokens per sequence chunk: W4A4 layers run chunks of at most N tokens at W4A16
      // and longer ones at W4A4, whatever else is in the batch (two groups of steps).
      {
        kernels::A16Scope a16(kernels::A16Choice::a16);
        run([&](const SequenceChunk& c) { return c.n <= a16_max_tokens_; });
      }
      kernels::A16Scope a4(kernels::A16Choice::a4);
      run([&](const SequenceChunk& c) { return c.n > a16_max_tokens_; });
    }
  } catch (...) {
    // Positions past the old lengths hold garbage that the next forward overwrites; recurrent
    // states go back to their committed copies.
    for (size_t b = 0; b < batch.size(); ++b) batch[b].state->abandon_forward(lengths[b]);
    throw;
  }
  for (const SequenceChunk& c : batch) {
    c.state->commit_recurrent();
    if (c.positions) {  // text after the chunk resumes past its largest rotary position
      int64_t mx = std::numeric_limits<int64_t>::min();
      for (int64_t i = 0; i < 3 * c.n; ++i) mx = std::max(mx, c.positions[i]);
      c.state->set_rope_delta(mx + 1 - c.state->length());
    }
  }
}

void CausalLM::forward_step(std::span<const SequenceChunk> batch, const std::vector<Piece>& in,
                            StageLink* link) const {
  const int64_t hid = config().hidden_size;
  std::vector<Piece> pieces = in;
  std::vector<SequenceSpan> spans;
  std::vector<int32_t> tokens;
  for (Piece& p : pieces) {
    const SequenceChunk& c = batch[p.chunk];
    p.pos0 = c.state->length();
    spans.push_back({c.state, p.row0, p.n, p.pos0, c.rewindable, p.pos0 - p.offset + c.n,
                     c.positions ? c.positions + 3 * p.offset : nullptr, c.state->rope_delta(),
                     c.bidir_end ? c.bidir_end + p.offset : nullptr});
    tokens.insert(tokens.end(), c.tokens + p.offset, c.tokens + p.offset + p.n);
  }
  const int64_t m = static_cast<int64_t>(tokens.size());
  auto locate = [&](int64_t row) { return locate_row(batch, pieces, row); };

  const int64_t width = hid * residual_streams_;  // the residual's values per row
  const size_t size = static_cast<size_t>(m * hid);
  const size_t wide = static_cast<size_t>(m * width);
  std::vector<float> h(wide), x(wide), y(wide);
  const LayerStep step{h.data(), m, spans, tokens.data(), dtype_, x.data(), y.data()};
  // A pipeline stage's K/V rows of this step that later stages read (model/state/stage_kv.h).
  std::vector<StageKvRows> kv_rows;
  if (!stage_kv_.received().empty() || !stage_kv_.sent().empty())
    for (const Piece& p : pieces) kv_rows.push_back({&batch[p.chunk].state->kv(), p.pos0, p.n});
  std::vector<uint8_t> msg_in;
  std::vector<std::span<const uint8_t>> kv_passed;
  const auto& carried = loader_->carried_across_stages();
  try {
    if (!has_embedding()) {
      link->receive(h.data(), m, width, msg_in);  // the stage before ran the embedding and its layers
      kv_passed = stage_kv_.unpack(split_stage_message(msg_in, carried, m), state_, kv_rows);
    } else {
      embed_.lookup(tokens.data(), m, h.data());
      round_to_dtype(h.data(), size, dtype_);
      if (config().scale_embeddings) {
        // × sqrt(hidden_size), the factor itself in the activation dtype (as transformers casts it
        // to the embedding's dtype).
        float scale = std::sqrt(static_cast<float>(hid));
        round_to_dtype(&scale, 1, dtype_);
        for (float& v : h) v *= scale;
        round_to_dtype(h.data(), size, dtype_);
      }
      for (const Piece& p : pieces) {  // image rows replace their placeholders' embeddings
        const SequenceChunk& c = batch[p.chunk];
        if (!c.embeds) continue;
        for (int64_t j = 0; j < p.n; ++j)
          if (const float* e = c.embeds[p.offset + j]) {
            float* row = h.data() + (p.row0 + j) * hid;
            std::copy_n(e, hid, row);
            round_to_dtype(row, static_cast<size_t>(hid), dtype_);
          }
      }
      check_finite(h.data(), m, hid, "the token embedding");
      // Several residual streams: each starts as the embedding (from the last row down, in place).
      for (int64_t r = m - 1; r >= 0 && residual_streams_ > 1; --r)
        for (int64_t k = residual_streams_ - 1; k >= 0; --k)
          if (r > 0 || k > 0) std::copy_n(h.data() + r * hid, hid, h.data() + r * width + k * hid);
    }
    const int64_t deepstack = deepstack_levels();
    for (size_t li = 0; li < layers_.size(); ++li) {
      layers_[li]->forward(step);
      const int64_t layer = first_layer_ + static_cast<int64_t>(li);
      if (layer < deepstack) add_deepstack(batch, pieces, layer, h.data());
      // The residual stream: catches what a layer produced before the next layer's norm hides it.
      check_finite(h.data(), m, width, "the hidden state after decoder layer ",
                   std::to_string(first_layer_ + static_cast<int64_t>(li)));
    }
  } catch (const NonFiniteError& e) {
    rethrow_located(e, e.row(), locate);
  }
  for (const Piece& p : pieces) {
    batch[p.chunk].state->kv().set_length(p.pos0 + p.n);
    batch[p.chunk].state->stage_recurrent();
  }
  if (!has_lm_head()) {
    // The next stage continues; the last one computes the logits.
    link->send(h.data(), m, width, join_stage_message(stage_kv_.pack(state_, kv_rows, kv_passed), carried, m));
    return;
  }
  if (hyper_head_) {  // the streams collapsed into the one row the final norm reads
    std::vector<float> one(size);
    hyper_head_->collapse(h.data(), m, one.data(), dtype_);
    std::copy(one.begin(), one.end(), h.begin());
  }
  step_logits(batch, pieces, h.data(), x.data());
}

void CausalLM::add_deepstack(std::span<const SequenceChunk> batch, const std::vector<Piece>& pieces, int64_t level,
                             float* h) const {
  // Qwen3-VL's DeepStack (transformers' _deepstack_process): an image row's level-l features, cast
  // to the activation dtype, added to its hidden state after decoder layer l.
  const int64_t hid = config().hidden_size;
  std::vector<float> e(static_cast<size_t>(hid));
  for (const Piece& p : pieces) {
    const SequenceChunk& c = batch[p.chunk];
    if (!c.embeds) continue;
    for (int64_t j = 0; j < p.n; ++j)
      if (const float* row = c.embeds[p.offset + j]) {
        std::copy_n(row + (level + 1) * hid, hid, e.data());
        round_to_dtype(e.data(), e.size(), dtype_);
        float* x = h + (p.row0 + j) * hid;
        for (int64_t i = 0; i < hid; ++i) x[i] += e[static_cast<size_t>(i)];
        round_to_dtype(x, static_cast<size_t>(hid), dtype_);
      }
  }
}

std::tuple<int64_t, int64_t, int64_t> CausalLM::locate_row(std::span<const SequenceChunk> batch,
                                                          const std::vector<Piece>& pieces, int64_t row) {
  for (const Piece& p : pieces)
    if (row >= p.row0 && row < p.row0 + p.n)
      return {p.chunk, p.pos0 + row - p.row0, batch[p.chunk].state->id()};
  return {-1, -1, -1};
}

void CausalLM::head_norm(const float* h, int64_t n, float* out) const {
  const int64_t hid = config().hidden_size;
  if (final_norm_.dim() > 0) final_norm_.forward(h, n, out, dtype_);
  else std::copy_n(h, n * hid, out);
}

void CausalLM::step_logits(std::span<const SequenceChunk> batch, const std::vector<Piece>& pieces, const float* h,
                           float* x) const {
  const int64_t hid = config().hidden_size, vocab = vocab_size();
  for (const Piece& p : pieces)  // the MTP head's input: every row, normed as lm_head sees it
    if (float* out = batch[p.chunk].hidden)
      head_norm(h + p.row0 * hid, p.n, out + p.offset * hid);

  // Logits only for the rows asked: every row of an `all` chunk, the last row of a `last` chunk.
  // A row the MTP head's input already holds normed is copied, not normed again (the norm is per
  // row: the same bits).
  std::vector<int64_t> rows;  // step rows
  std::vector<float*> outs;
  std::vector<const float*> normed;
  for (const Piece& p : pieces) {
    const SequenceChunk& c = batch[p.chunk];
    const float* done = c.hidden ? c.hidden + p.offset * hid : nullptr;
    int64_t first = p.n;  // none (no logits, or a `last` chunk whose last row is in a later step)
    if (c.logits == LogitsMode::all) first = 0;
    else if (c.logits == LogitsMode::last && p.offset + p.n == c.n) first = p.n - 1;
    for (int64_t i = first; i < p.n; ++i) {
      rows.push_back(p.row0 + i);
      outs.push_back(c.out + (c.logits == LogitsMode::all ? (p.offset + i) * vocab : 0));
      normed.push_back(done ? done + i * hid : nullptr);
    }
  }
  if (rows.empty()) return;
  const int64_t r = static_cast<int64_t>(rows.size());
  for (int64_t i = 0; i < r; ++i) {
    if (normed[i]) std::copy_n(normed[i], hid, x + i * hid);
    else head_norm(h + rows[i] * hid, 1, x + i * hid);
  }
  std::vector<float> logits(static_cast<size_t>(r * vocab));
  try {
    lm_head_->forward(x, r, logits.data());
    if (const double cap = config().final_logit_softcapping; cap > 0) {
      const float c = static_cast<float>(cap);
      for (float& v : logits) v = c * std::tanh(v / c);
      round_to_dtype(logits.data(), logits.size(), dtype_);
    }
    check_finite(logits.data(), r, vocab, "the logits");
  } catch (const NonFiniteError& e) {
    rethrow_located(e, rows[e.row()], [&](int64_t row) { return locate_row(batch, pieces, row); });
  }
  for (int64_t i = 0; i < r; ++i) std::copy_n(logits.data() + i * vocab, vocab, outs[i]);
}

}  // namespace fp4lm::model
