// MXFP4 layers on the NVFP4 W4A16 kernels (docs/KERNELS.md, "MXFP4"): the codes are NVFP4's (same
// E2M1 bytes, same nibble order, used in place); each row's E8M0 scales become E4M3 scales per 16
// under a per-row power-of-two global scale (quant::mxfp4_row_as_nvfp4), the same numbers exactly.
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/nvfp4_matrix.h"
#include "quant/mxfp4.h"

namespace fp4lm::kernels::cpu {

Nvfp4Matrix prepare_mxfp4_as_nvfp4_matrix(LinearWeights w) {
  const std::string name = w.shards.empty() ? std::string("?") : w.shards[0].name;
  if (w.key.weight != WeightKey::mxfp4)
    fail("MXFP4 CPU kernel: layer {} is not MXFP4 (weight scheme {})", name, weight_key_name(w.key.weight));
  if (w.n <= 0 || w.k <= 0 || w.k % 32 != 0)
    fail("MXFP4 layer {}: shape [{}, {}] needs n > 0 and k a positive multiple of 32", name, w.n, w.k);
  auto scales = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(w.n * (w.k / 16)));
  Nvfp4Matrix m;
  m.n = w.n;
  m.k = w.k;
  int64_t row = 0;
  for (const WeightShard& s : w.shards) {
    const Mxfp4View& v = s.as<Mxfp4View>();
    if (s.rows < 0) fail("{}: negative row count {}", s.name, s.rows);
    if (s.rows > 0 && (!v.codes || !v.scales)) fail("{}: MXFP4 shard lacks its codes or scales", s.name);
    if (row + s.rows > w.n) fail("MXFP4 layer {}: shards hold more than n = {} rows", name, w.n);
    for (int64_t r = 0; r < s.rows; ++r, ++row) {
      uint8_t* e4m3 = scales->data() + row * (w.k / 16);
      float global = 0;
      const std::string why =
          quant::mxfp4_row_as_nvfp4(v.codes + r * (w.k / 2), v.scales + r * (w.k / 32), w.k, e4m3, global);
      if (!why.empty()) fail("{}: row {}: {}", s.name, r, why);
      m.row_codes.push_back(v.codes + r * (w.k / 2));
      m.row_scales.push_back(e4m3);
      m.row_global.push_back(global);
    }
  }
  if (row != w.n) fail("MXFP4 layer {}: shards hold {} rows, expected n = {}", name, row, w.n);
  if (!w.bias.empty() && static_cast<int64_t>(w.bias.size()) != w.n)
    fail("MXFP4 layer {}: bias has {} elements, expected {}", name, w.bias.size(), w.n);
  m.bias = std::move(w.bias);
  m.weight_bytes = static_cast<size_t>(w.n * (w.k / 2 + w.k / 32));
  m.keepalive = std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<std::vector<uint8_t>>>>(
      std::move(w.keepalive), std::move(scales));
  return m;
}

}  // namespace fp4lm::kernels::cpu
