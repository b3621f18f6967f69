#include "model/state/stage_carried.h"

#include <cstring>

#include "core/error.h"

namespace fp4lm::model {

namespace {
void append_part(std::vector<uint8_t>& out, std::span<const uint8_t> part) {
  const uint64_t n = part.size();
  const auto* p = reinterpret_cast<const uint8_t*>(&n);
  out.insert(out.end(), p, p + sizeof n);
  out.insert(out.end(), part.begin(), part.end());
}

std::span<const uint8_t> read_part(std::span<const uint8_t> msg, size_t& off, const char* what) {
  uint64_t n = 0;
  if (msg.size() - off < sizeof n)
    fail("pipeline: a step's message from the stage before ends before {} ({} bytes)", what, msg.size());
  std::memcpy(&n, msg.data() + off, sizeof n);
  off += sizeof n;
  if (n > msg.size() - off)
    fail("pipeline: a step's message from the stage before declares {} bytes of {}, {} remain", n, what,
         msg.size() - off);
  const std::span<const uint8_t> part = msg.subspan(off, static_cast<size_t>(n));
  off += static_cast<size_t>(n);
  return part;
}
}  // namespace

std::vector<uint8_t> join_stage_message(std::span<const uint8_t> kv,
                                        const std::vector<std::shared_ptr<StageCarried>>& carried, int64_t rows) {
  if (carried.empty()) return {kv.begin(), kv.end()};  // the K/V part alone, unframed
  std::vector<uint8_t> out;
  append_part(out, kv);
  for (const auto& c : carried) append_part(out, c->carried(rows));
  return out;
}

std::span<const uint8_t> split_stage_message(std::span<const uint8_t> msg,
                                             const std::vector<std::shared_ptr<StageCarried>>& carried,
                                             int64_t rows) {
  if (carried.empty()) return msg;
  size_t off = 0;
  const std::span<const uint8_t> kv = read_part(msg, off, "the shared K/V");
  for (const auto& c : carried) c->receive(read_part(msg, off, c->what()), rows);
  if (off != msg.size())
    fail("pipeline: a step's message from the stage before holds {} bytes, {} of them expected", msg.size(), off);
  return kv;
}

}  // namespace fp4lm::model
