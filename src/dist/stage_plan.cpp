#include "dist/stage_plan.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "model/load/bytes_read_per_token.h"
#include "model/model_config.h"
#include "model/load/model_loader.h"

namespace fp4lm::dist {

namespace {

// The decoder layer a tensor belongs to (-1: none), and whether it is the embedding table.
struct Owner {
  int64_t layer = -1;
  bool embedding = false;
};

struct Naming {
  std::string prefix;  // the text model's tensors, "model." or a VL checkpoint's
  std::string wrapper;  // ModelConfig::wrapper_prefix
  int64_t num_layers = 0;
  bool tied = false;
  int64_t num_experts = 0, top_k = 0;  // routed experts (0: none)
};

Naming naming_of(const io::Checkpoint& ckpt) {
  const model::ModelConfig c = model::parse_model_config(ckpt.config(), ckpt.dir() + "/config.json");
  return {c.wrapper_prefix + model::text_tensor_prefix(c, ckpt), c.wrapper_prefix, c.num_layers, c.tie_word_embeddings,
          c.moe.num_experts, c.moe.top_k};
}

Owner owner_of(const std::string& name, const Naming& n) {
  Owner o;
  if (name.rfind(n.prefix, 0) != 0) return o;
  const std::string rest = name.substr(n.prefix.size());
  if (rest.rfind("embed_tokens.", 0) == 0) o.embedding = true;
  if (rest.rfind("layers.", 0) != 0) return o;
  size_t i = 7, v = 0;
  const size_t start = i;
  while (i < rest.size() && rest[i] >= '0' && rest[i] <= '9') v = v * 10 + static_cast<size_t>(rest[i++] - '0');
  if (i == start || i >= rest.size() || rest[i] != '.') return o;
  o.layer = static_cast<int64_t>(v);
  return o;
}

// FNV-1a, 64 bits.
void mix(uint64_t& h, const void* p, size_t n) {
  const auto* c = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= c[i];
    h *= 1099511628211ull;
  }
}
constexpr uint64_t kFnvBasis = 14695981039346656037ull;

}  // namespace

LayerBytes layer_bytes(const io::Checkpoint& ckpt) {
  const Naming n = naming_of(ckpt);
  LayerBytes b;
  // A layer's routed experts count with the share a token reads (model/load/bytes_read_per_token.h):
  // an MoE layer holds far more than it reads.
  std::vector<double> read(static_cast<size_t>(n.num_layers), 0.0);
  for (const std::string& name : ckpt.tensor_names()) {
    const Owner o = owner_of(name, n);
    const uint64_t bytes = ckpt.get(name).nbytes;
    if (o.layer >= 0 && o.layer < n.num_layers)
      read[static_cast<size_t>(o.layer)] +=
          model::bytes_read_per_token(name, static_cast<double>(bytes), n.num_experts, n.top_k);
    else if (name.rfind(n.wrapper + "lm_head.", 0) == 0 || (n.tied && o.embedding))
      b.head += bytes;
  }
  for (double r : read) b.layer.push_back(static_cast<uint64_t>(std::llround(r)));
  return b;
}

std::vector<Stage> plan_stages(const LayerBytes& b, int n) {
  const int64_t layers = static_cast<int64_t>(b.layer.size());
  if (n < 1) usage_fail("--pipeline-parallel-size must be at least 1, got {}", n);
  if (layers < n) usage_fail("--pipeline-parallel-size {} exceeds the model's {} decoder layers", n, layers);
  std::vector<uint64_t> prefix(static_cast<size_t>(layers) + 1, 0);
  for (int64_t i = 0; i < layers; ++i) prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + b.layer[static_cast<size_t>(i)];
  auto cost = [&](int64_t a, int64_t e) {  // layers [a, e); the last stage reads lm_head too
    return prefix[static_cast<size_t>(e)] - prefix[static_cast<size_t>(a)] + (e == layers ? b.head : 0);
  };
  // best[k][e]: the smallest largest stage for layers [0, e) in k stages; cut[k][e] its last start.
  constexpr uint64_t inf = std::numeric_limits<uint64_t>::max();
  std::vector<std::vector<uint64_t>> best(static_cast<size_t>(n) + 1, std::vector<uint64_t>(static_cast<size_t>(layers) + 1, inf));
  std::vector<std::vector<int64_t>> cut(best.size(), std::vector<int64_t>(static_cast<size_t>(layers) + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= n; ++k)
    for (int64_t e = k; e <= layers; ++e)
      for (int64_t a = k - 1; a < e; ++a) {
        const uint64_t prev = best[static_cast<size_t>(k) - 1][static_cast<size_t>(a)];
        if (prev == inf) continue;
        const uint64_t v = std::max(prev, cost(a, e));
        if (v < best[static_cast<size_t>(k)][static_cast<size_t>(e)]) {
          best[static_cast<size_t>(k)][static_cast<size_t>(e)] = v;
          cut[static_cast<size_t>(k)][static_cast<size_t>(e)] = a;
        }
      }
  std::vector<Stage> stages(static_cast<size_t>(n));
  int64_t e = layers;
  for (int k = n; k >= 1; --k) {
    const int64_t a = cut[static_cast<size_t>(k)][static_cast<size_t>(e)];
    stages[static_cast<size_t>(k) - 1] = {a, e, cost(a, e)};
    e = a;
  }
  return stages;
}

StageFingerprint fingerprint(const io::Checkpoint& ckpt, const Stage& s, int64_t num_layers) {
  StageFingerprint f;
  f.config = kFnvBasis;
  const std::string cfg = ckpt.config().dump();
  mix(f.config, cfg.data(), cfg.size());
  const Naming n = naming_of(ckpt);
  for (const std::string& name : ckpt.tensor_names()) {  // sorted: the same order on every rank
    const Owner o = owner_of(name, n);
    const bool mine = o.layer >= 0 ? (o.layer >= s.first && o.layer < s.end)
                                   : o.embedding ? (s.first == 0 || (n.tied && s.end == num_layers))
                                                 : s.end == num_layers;
    if (!mine) continue;
    const TensorView& t = ckpt.get(name);
    const std::string file = std::filesystem::path(ckpt.file_of(name)).filename().string();
    uint64_t& h = f.files.try_emplace(file, kFnvBasis).first->second;
    mix(h, name.data(), name.size() + 1);
    const auto dt = static_cast<int>(t.dtype);
    mix(h, &dt, sizeof dt);
    for (int64_t d : t.shape) mix(h, &d, sizeof d);
    mix(h, &t.nbytes, sizeof t.nbytes);
  }
  return f;
}

}  // namespace fp4lm::dist
