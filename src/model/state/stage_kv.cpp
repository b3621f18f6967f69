#include "model/state/stage_kv.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace fp4lm::model {

namespace {
template <typename T>
T read_at(std::span<const uint8_t> msg, size_t& off) {
  if (msg.size() - off < sizeof(T)) fail("pipeline: the shared K/V of a step ends early ({} bytes)", msg.size());
  T v;
  std::memcpy(&v, msg.data() + off, sizeof(T));
  off += sizeof(T);
  return v;
}
template <typename T>
void append(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
}  // namespace

std::vector<std::span<const uint8_t>> StageKv::unpack(std::span<const uint8_t> msg, const StateLayout& layout,
                                                      std::span<const StageKvRows> rows) const {
  std::vector<std::span<const uint8_t>> segs;
  size_t off = 0;
  for (const int64_t layer : in_) {
    const auto got = read_at<int64_t>(msg, off);
    const auto bytes = read_at<uint64_t>(msg, off);
    if (got != layer || bytes > msg.size() - off)
      fail("pipeline: the stage before sent the K/V of layer {} ({} bytes), expected layer {}", got, bytes, layer);
    const std::span<const uint8_t> seg(msg.data() + off, static_cast<size_t>(bytes));
    off += static_cast<size_t>(bytes);
    segs.push_back(seg);
    const int64_t slot = layout.find_kv_slot_of_layer(layer);
    if (slot < 0) continue;  // only passed on: no layer of this stage reads it
    size_t want = 0;
    for (const StageKvRows& r : rows) want += r.kv->slot_block_bytes(slot, r.n);
    if (want != seg.size())
      fail("pipeline: the stage before sent {} bytes of layer {}'s K/V for a step, this stage expects {}", seg.size(),
           layer, want);
    const uint8_t* p = seg.data();
    for (const StageKvRows& r : rows) {
      r.kv->load_slot_rows(slot, r.pos0, r.n, p);
      p += r.kv->slot_block_bytes(slot, r.n);
    }
  }
  if (off != msg.size())
    fail("pipeline: the shared K/V of a step holds {} bytes, {} of them read", msg.size(), off);
  return segs;
}

std::vector<uint8_t> StageKv::pack(const StateLayout& layout, std::span<const StageKvRows> rows,
                                   const std::vector<std::span<const uint8_t>>& received) const {
  std::vector<uint8_t> out;
  for (const int64_t layer : out_) {
    append<int64_t>(out, layer);
    if (layer < first_) {  // an earlier stage's: passed on as it came
      const auto it = std::find(in_.begin(), in_.end(), layer);
      const size_t k = static_cast<size_t>(it - in_.begin());
      if (it == in_.end() || k >= received.size()) fail("pipeline: layer {}'s K/V never came to this stage", layer);
      append<uint64_t>(out, received[k].size());
      out.insert(out.end(), received[k].begin(), received[k].end());
      continue;
    }
    const int64_t slot = layout.kv_slot_of_layer(layer);
    size_t bytes = 0;
    for (const StageKvRows& r : rows) bytes += r.kv->slot_block_bytes(slot, r.n);
    append<uint64_t>(out, bytes);
    size_t at = out.size();
    out.resize(at + bytes);
    for (const StageKvRows& r : rows) {
      r.kv->save_slot_rows(slot, r.pos0, r.n, out.data() + at);
      at += r.kv->slot_block_bytes(slot, r.n);
    }
  }
  return out;
}

}  // namespace fp4lm::model
