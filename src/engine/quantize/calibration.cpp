#include "engine/quantize/calibration.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "kernels/expert_activation.h"
#include "model/arch/arch.h"
#include "model/causal_lm.h"
#include "model/layers/linear.h"
#include "quant/nvfp4.h"

namespace fp4lm::engine {

namespace {

// "<prefix>.experts.<digits>.<proj>" -> {prefix + ".experts.", "." + proj}; nullopt otherwise.
std::optional<std::pair<std::string, std::string>> per_expert_name(const std::string& layer) {
  const size_t at = layer.rfind(".experts.");
  if (at == std::string::npos) return std::nullopt;
  const size_t digits = at + 9, end = layer.find('.', digits);
  if (end == std::string::npos || end == digits) return std::nullopt;
  for (size_t i = digits; i < end; ++i)
    if (layer[i] < '0' || layer[i] > '9') return std::nullopt;
  return std::pair{layer.substr(0, digits), layer.substr(end)};
}

}  // namespace

float ActivationAmax::of(const QuantGroup& g) const {
  const std::map<std::string, float>& m =
      g.input == GroupInput::linear ? linear : (g.input == GroupInput::experts_w13 ? experts_w13 : experts_w2);
  // Experts planned as per-expert Linears (Nemotron-H's relu² experts): one amax per projection
  // over every expert of the block, the max over all routed tokens, as the fused experts'
  // experts_w13 / experts_w2 are, so an expert no calibration token chose gets a scale too.
  if (const auto pe = g.input == GroupInput::linear ? per_expert_name(g.layer) : std::nullopt) {
    float amax = -1.0f;
    for (auto it = m.lower_bound(pe->first); it != m.end() && it->first.compare(0, pe->first.size(), pe->first) == 0;
         ++it) {
      const auto other = per_expert_name(it->first);
      if (other && other->second == pe->second) amax = std::max(amax, it->second);
    }
    if (amax < 0.0f) fail("calibration never observed the input of any expert's {} in {}", pe->second.substr(1), pe->first);
    if (!(amax > 0.0f) || !std::isfinite(amax))
      fail("calibration saw max |x| = {} for the input of layer {}: no input_scale can be derived (calibrate on more "
           "or other data)",
           amax, g.layer);
    return amax;
  }
  auto it = m.find(g.layer);
  const char* what = g.input == GroupInput::linear ? "input"
                     : g.input == GroupInput::experts_w13 ? "expert gate/up input"
                                                          : "expert down input";
  if (it == m.end()) fail("calibration never observed the {} of layer {}", what, g.layer);
  if (!(it->second > 0.0f) || !std::isfinite(it->second))
    fail("calibration saw max |x| = {} for the {} of layer {}: no input_scale can be derived (calibrate on more "
         "or other data)",
         it->second, what, g.layer);
  return it->second;
}

namespace {

// The expert weights of one MoE layer, read from the checkpoint in its dtype.
struct ExpertWeights {
  const model::LayerSpec* spec = nullptr;
  std::vector<const TensorView*> w1, w3;  // per expert: gate [inter, hidden], up [inter, hidden]
};

// max |act(x·w1ᵀ, x·w3ᵀ)| over the tokens routed to each expert, act the layer's expert activation
// (silu(gate) · up for most, gelu_tanh(gate) · up for Gemma 4; kernels/expert_activation.h, the
// function the MoE kernels run): the inputs the experts' down projections see. Computed from the
// unquantized weights, one expert per task.
float w2_input_amax(const ExpertWeights& ew, const float* x, int64_t m, const int32_t* ids, int64_t top_k,
                    std::vector<int64_t>& routed) {
  const int64_t E = ew.spec->num_experts, H = ew.spec->hidden, I = ew.spec->inter;
  std::vector<std::vector<int64_t>> tokens(static_cast<size_t>(E));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = ids[i * top_k + j];
      if (e < 0 || e >= E) fail("{}: router chose expert {} of {}", ew.spec->name, e, E);
      tokens[static_cast<size_t>(e)].push_back(i);
      ++routed[static_cast<size_t>(e)];
    }
  std::vector<float> part(static_cast<size_t>(ThreadPool::global().size()) + 1, 0.0f);
  ThreadPool::global().parallel_for(E, [&](int64_t e0, int64_t e1, int tid) {
    std::vector<float> g_row(static_cast<size_t>(H)), u_row(static_cast<size_t>(H));
    float mx = 0.0f;
    for (int64_t e = e0; e < e1; ++e) {
      const auto& tk = tokens[static_cast<size_t>(e)];
      if (tk.empty()) continue;
      const TensorView& w1 = *ew.w1[static_cast<size_t>(e)];
      const TensorView& w3 = *ew.w3[static_cast<size_t>(e)];
      const size_t es1 = dtype_size(w1.dtype), es3 = dtype_size(w3.dtype);
      for (int64_t r = 0; r < I; ++r) {
        to_f32_n(static_cast<const uint8_t*>(w1.data) + static_cast<size_t>(r * H) * es1, w1.dtype, g_row.data(),
                 g_row.size());
        to_f32_n(static_cast<const uint8_t*>(w3.data) + static_cast<size_t>(r * H) * es3, w3.dtype, u_row.data(),
                 u_row.size());
        for (int64_t t : tk) {
          const float* xt = x + t * H;
          float g = 0.0f, u = 0.0f;
          for (int64_t c = 0; c < H; ++c) {
            g += xt[c] * g_row[static_cast<size_t>(c)];
            u += xt[c] * u_row[static_cast<size_t>(c)];
          }
          const float h13[2] = {g, u};  // one column: its gate, then its up value
          float h = 0.0f;
          kernels::apply_expert_activation(ew.spec->expert_activation, h13, 1, &h);
          mx = std::max(mx, std::fabs(h));
        }
      }
    }
    part[static_cast<size_t>(tid)] = std::max(part[static_cast<size_t>(tid)], mx);
  });
  return *std::max_element(part.begin(), part.end());
}

// Every MoE layer's expert weights (w1, w3 per expert) for w2_input_amax, and a zero routing count
// per expert.
void collect_expert_weights(const io::Checkpoint& ck, const ExportPlan& plan, const std::set<std::string>& moe_layers,
                            std::map<std::string, ExpertWeights>& experts,
                            std::map<std::string, std::vector<int64_t>>& routed) {
  for (const model::LayerSpec& spec : plan.layers) {
    if (!moe_layers.count(spec.name)) continue;
    ExpertWeights& ew = experts[spec.name];
    ew.spec = &spec;
    for (int64_t e = 0; e < spec.num_experts; ++e) {
      const std::string b = fmt::format("{}.{}.", spec.shards[0], e);
      ew.w1.push_back(&ck.get(b + spec.expert_proj[0] + ".weight"));
      ew.w3.push_back(&ck.get(b + spec.expert_proj[1] + ".weight"));
    }
    routed[spec.name].assign(static_cast<size_t>(spec.num_experts), 0);
  }
}

// Engine options whose build hooks observe the calibrated layers' inputs: each Linear's amax, each
// MoE layer's input amax and its experts' down-projection input amax (counting the routing). The
// hooks and observers keep pointers to the arguments, which must outlive the model.
// Adds x[m, k]'s rows to the input's statistics: the channels' squares, and x^T x's upper
// triangle (rows of H in parallel; each row of H stays in cache while the m tokens pass).
void accumulate_stats(InputStats& s, const float* x, int64_t m, int64_t k, bool hessian, bool awq) {
  if (s.k == 0) {
    s.k = k;
    s.sq.assign(static_cast<size_t>(k), 0.0);
    if (hessian) s.h.assign(static_cast<size_t>(k * k), 0.0);
    if (awq) {
      s.abs_sum.assign(static_cast<size_t>(k), 0.0);
      s.abs_max.assign(static_cast<size_t>(k), 0.0f);
    }
  }
  s.rows += m;
  for (int64_t t = 0; t < m; ++t)
    for (int64_t c = 0; c < k; ++c) {
      const double v = x[t * k + c];
      s.sq[static_cast<size_t>(c)] += v * v;
    }
  if (awq)
    for (int64_t t = 0; t < m; ++t)
      for (int64_t c = 0; c < k; ++c) {
        const float a = std::fabs(x[t * k + c]);
        s.abs_sum[static_cast<size_t>(c)] += a;
        s.abs_max[static_cast<size_t>(c)] = std::max(s.abs_max[static_cast<size_t>(c)], a);
      }
  if (!hessian) return;
  double* h = s.h.data();
  // One call's (at most a few dozen tokens') products summed in float32 (twice the SIMD width of
  // double), then added to the double total.
  auto row = [&](int64_t i, std::vector<float>& acc) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    float* a = acc.data();  // a[j - i] for j in [i, k)
    const int64_t len = k - i;
    for (int64_t t = 0; t < m; ++t) {
      const float* xt = x + t * k + i;
      const float xi = xt[0];
      if (xi == 0.0f) continue;
      for (int64_t j = 0; j < len; ++j) a[j] += xi * xt[j];
    }
    double* hi = h + i * k + i;
    for (int64_t j = 0; j < len; ++j) hi[j] += a[j];
  };
  // Rows i and k-1-i together: every task gets the same share of the triangle.
  ThreadPool::global().parallel_for((k + 1) / 2, [&](int64_t p0, int64_t p1, int) {
    std::vector<float> acc;
    for (int64_t p = p0; p < p1; ++p) {
      acc.resize(static_cast<size_t>(k - p));
      row(p, acc);
      if (k - 1 - p != p) {
        acc.resize(static_cast<size_t>(p + 1));
        row(k - 1 - p, acc);
      }
    }
  });
}

model::EngineOptions observing_options(const std::set<std::string>& linear_layers, const std::set<std::string>& moe_layers,
                                       const std::map<std::string, ExpertWeights>& experts,
                                       std::map<std::string, std::vector<int64_t>>& routed, ActivationAmax& r,
                                       const CalibrationOptions& opts) {
  ActivationAmax* res = &r;
  model::EngineOptions eo;
  const bool stats = opts.second_moments || opts.hessians || opts.awq, hessian = opts.hessians, awq = opts.awq;
  eo.on_linear_built = [lin = &linear_layers, res, stats, hessian, awq](model::Linear& l) {
    const std::string name = l.spec().name;
    if (!lin->count(name)) return;
    const int64_t in = l.in_features();
    l.set_input_observer([res, name, in, stats, hessian, awq](const float* x, int64_t m) {
      float& a = res->linear[name];
      a = std::max(a, quant::amax(x, static_cast<size_t>(m * in)));
      if (stats) accumulate_stats(res->inputs[name], x, m, in, hessian, awq);
    });
  };
  eo.on_moe_built = [moe = &moe_layers, ex = &experts, rt = &routed, res](model::FusedMoe& f) {
    const std::string name = f.spec().name;
    if (!moe->count(name)) return;
    const ExpertWeights* ew = &ex->at(name);
    std::vector<int64_t>* counts = &rt->at(name);
    const int64_t hidden = f.spec().hidden;
    f.set_input_observer([res, name, ew, counts, hidden](const float* x, int64_t m, const int32_t* ids, int64_t top_k) {
      float& a13 = res->experts_w13[name];
      a13 = std::max(a13, quant::amax(x, static_cast<size_t>(m * hidden)));
      float& a2 = res->experts_w2[name];
      a2 = std::max(a2, w2_input_amax(*ew, x, m, ids, top_k, *counts));
    });
  };
  return eo;
}

// Runs every sequence through the model in 64-token chunks (their ids checked), counting them in
// r, with a progress line on a terminal.
void run_sequences(model::CausalLM& lm, const std::vector<std::vector<int32_t>>& sequences, model::LogitsMode mode,
                   bool progress, ActivationAmax& r) {
  const int64_t vocab = lm.vocab_size(), chunk = 64;
  std::vector<float> logits;
  if (mode == model::LogitsMode::all) logits.resize(static_cast<size_t>(chunk * vocab));
  const bool bar = progress && ::isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t s = 0; s < sequences.size(); ++s) {
    const std::vector<int32_t>& ids = sequences[s];
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(ids.size()), lm.max_model_len());
    if (n == 0) continue;
    for (int64_t i = 0; i < n; ++i)
      if (ids[static_cast<size_t>(i)] < 0 || ids[static_cast<size_t>(i)] >= vocab)
        fail("calibration sequence {}: token id {} at position {} is outside the vocabulary [0, {})", s,
             ids[static_cast<size_t>(i)], i, vocab);
    model::SequenceState cache = lm.new_sequence(n);
    for (int64_t p = 0; p < n; p += chunk) {
      const int64_t c = std::min(chunk, n - p);
      lm.forward(cache, ids.data() + p, c, mode, logits.empty() ? nullptr : logits.data());
    }
    r.sequences += 1;
    r.tokens += n;
    if (bar) {
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double eta = el / static_cast<double>(s + 1) * static_cast<double>(sequences.size() - s - 1);
      std::fprintf(stderr, "\rcalibrating %zu/%zu sequences, %lld tokens  elapsed %ds  ETA %ds\033[K", s + 1,
                   sequences.size(), static_cast<long long>(r.tokens), static_cast<int>(el),
                   static_cast<int>(eta + 0.5));
    }
  }
  if (bar) std::fprintf(stderr, "\r\033[K");
}

// One INFO line per MoE layer with experts calibration never routed to.
void log_never_routed(const std::map<std::string, std::vector<int64_t>>& routed) {
  for (const auto& [name, counts] : routed) {
    const auto never = std::count(counts.begin(), counts.end(), 0);
    if (never > 0)
      log().info("{}: {} of {} experts were never routed to during calibration; like every expert of the layer they "
                 "take the layer's shared input_scale (the max over the others)",
                 name, never, counts.size());
  }
}

}  // namespace

ActivationAmax calibrate(std::shared_ptr<io::Checkpoint> ckpt, const ExportPlan& plan,
                         const std::vector<std::vector<int32_t>>& sequences, const CalibrationOptions& opts) {
  if (sequences.empty()) fail("calibration: no sequences");
  ActivationAmax r;
  std::set<std::string> linear_layers, moe_layers;
  for (const QuantGroup& g : plan.groups) (g.input == GroupInput::linear ? linear_layers : moe_layers).insert(g.layer);
  std::map<std::string, ExpertWeights> experts;
  std::map<std::string, std::vector<int64_t>> routed;
  collect_expert_weights(*ckpt, plan, moe_layers, experts, routed);
  // Unquantized checkpoint: every layer runs its weights as they are.
  const model::EngineOptions eo = observing_options(linear_layers, moe_layers, experts, routed, r, opts);
  model::LoadOptions lo;
  lo.progress = opts.progress;
  auto lm = model::CausalLM::load(ckpt, eo, lo);
  // lm_head only runs when logits are asked for; ask only when it is calibrated.
  run_sequences(*lm, sequences, plan.lm_head_quantized ? model::LogitsMode::all : model::LogitsMode::none,
                opts.progress, r);
  if (r.tokens == 0) fail("calibration: every sequence is empty");
  log_never_routed(routed);
  return r;
}

namespace {

// A one-layer stage's neighbours: each forward step's residual stream rows come from the stored
// hidden states of the sequence and go back into the same rows (a step's rows are read before
// they are written), so one buffer per sequence carries the stream from layer to layer.
class StoredHiddenLink : public model::StageLink {
 public:
  void start(float* rows) { rows_ = rows, in_ = 0, out_ = 0; }
  void receive(float* h, int64_t rows, int64_t hidden, std::vector<uint8_t>& kv) override {
    std::memcpy(h, rows_ + in_ * hidden, static_cast<size_t>(rows * hidden) * sizeof(float));
    in_ += rows;
    kv.clear();
  }
  void send(const float* h, int64_t rows, int64_t hidden, std::span<const uint8_t> kv) override {
    if (!kv.empty()) fail("internal: a one-layer calibration stage sent K/V rows across its cut");
    std::memcpy(rows_ + out_ * hidden, h, static_cast<size_t>(rows * hidden) * sizeof(float));
    out_ += rows;
  }

 private:
  float* rows_ = nullptr;
  int64_t in_ = 0, out_ = 0;
};

}  // namespace

ActivationAmax calibrate_by_layer(std::shared_ptr<io::Checkpoint> ckpt, const ExportPlan& plan,
                                  const std::vector<std::vector<int32_t>>& sequences, const CalibrationOptions& opts,
                                  const StatsSink& sink) {
  const model::ModelConfig& c = plan.config;
  bool cut_free = c.num_layers > 1;
  for (int64_t i = 1; i < c.num_layers && cut_free; ++i) cut_free = model::kv_read_across(c, i).empty();
  if (!cut_free) {
    ActivationAmax r = calibrate(ckpt, plan, sequences, opts);
    sink(r, r.inputs);
    r.inputs.clear();
    return r;
  }
  if (sequences.empty()) fail("calibration: no sequences");
  ActivationAmax r;
  std::set<std::string> linear_layers, moe_layers;
  for (const QuantGroup& g : plan.groups) (g.input == GroupInput::linear ? linear_layers : moe_layers).insert(g.layer);
  std::map<std::string, ExpertWeights> experts;
  std::map<std::string, std::vector<int64_t>> routed;
  collect_expert_weights(*ckpt, plan, moe_layers, experts, routed);
  const model::EngineOptions eo = observing_options(linear_layers, moe_layers, experts, routed, r, opts);
  const int64_t hid = c.hidden_size, chunk = 64;
  std::vector<std::vector<float>> hidden(sequences.size());  // per sequence [n, hidden]
  std::vector<int64_t> lengths(sequences.size(), 0);
  const bool bar = opts.progress && ::isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  StoredHiddenLink link;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    model::LoadOptions lo;
    lo.progress = false;
    lo.first_layer = layer;
    lo.end_layer = layer + 1;
    std::unique_ptr<model::CausalLM> lm;
    {
      // The stages after the first would repeat its load lines (KV cache, backends, "Loaded ...").
      const auto level = log().level();
      if (layer > 0) log().set_level(std::max(level, spdlog::level::warn));
      try {
        lm = model::CausalLM::load(ckpt, eo, lo);
      } catch (...) {
        log().set_level(level);
        throw;
      }
      log().set_level(level);
    }
    const bool last = layer + 1 == c.num_layers;
    const model::LogitsMode mode = last && plan.lm_head_quantized ? model::LogitsMode::all : model::LogitsMode::none;
    std::vector<float> logits(mode == model::LogitsMode::all ? static_cast<size_t>(chunk * lm->vocab_size()) : 0);
    for (size_t s = 0; s < sequences.size(); ++s) {
      const std::vector<int32_t>& ids = sequences[s];
      if (layer == 0) {
        const int64_t n = std::min<int64_t>(static_cast<int64_t>(ids.size()), lm->max_model_len());
        for (int64_t i = 0; i < n; ++i)
          if (ids[static_cast<size_t>(i)] < 0 || ids[static_cast<size_t>(i)] >= lm->vocab_size())
            fail("calibration sequence {}: token id {} at position {} is outside the vocabulary [0, {})", s,
                 ids[static_cast<size_t>(i)], i, lm->vocab_size());
        lengths[s] = n;
        hidden[s].assign(static_cast<size_t>(n * hid), 0.0f);
        if (n > 0) r.sequences += 1, r.tokens += n;
      }
      const int64_t n = lengths[s];
      if (n == 0) continue;
      model::SequenceState cache = lm->new_sequence(n);
      link.start(hidden[s].data());
      for (int64_t p = 0; p < n; p += chunk) {
        const model::SequenceChunk sc{&cache, ids.data() + p, std::min(chunk, n - p), mode,
                                      logits.empty() ? nullptr : logits.data()};
        lm->forward(std::span<const model::SequenceChunk>(&sc, 1), &link);
      }
    }
    if (layer == 0 && r.tokens == 0) fail("calibration: every sequence is empty");
    if (last) hidden.clear();
    sink(r, r.inputs);
    r.inputs.clear();
    if (bar) {
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double eta = el / static_cast<double>(layer + 1) * static_cast<double>(c.num_layers - layer - 1);
      std::fprintf(stderr, "\rcalibrating and quantizing layer %lld/%lld (%zu sequences, %lld tokens)  elapsed %ds  ETA %ds\033[K",
                   static_cast<long long>(layer + 1), static_cast<long long>(c.num_layers), sequences.size(),
                   static_cast<long long>(r.tokens), static_cast<int>(el), static_cast<int>(eta + 0.5));
    }
  }
  if (bar) std::fprintf(stderr, "\r\033[K");
  log_never_routed(routed);
  return r;
}

}  // namespace fp4lm::engine
