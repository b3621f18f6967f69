#include "engine/mtp_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace fp4lm::engine {

namespace {
int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}
}  // namespace

void MtpDrafter::allocate(int64_t seq, int64_t capacity) {
  seqs_.erase(seq);
  seqs_.emplace(seq, Seq{lm_.new_mtp_sequence(capacity, seq), 0, {}});
}

MtpDrafter::Seq& MtpDrafter::get(int64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail("MTP drafter: no sequence {}", seq);
  return it->second;
}

float* MtpDrafter::hidden_rows(int64_t seq, int64_t pos0, int64_t n) {
  Seq& s = get(seq);
  const size_t hid = static_cast<size_t>(lm_.config().hidden_size);
  const int64_t end = s.read + static_cast<int64_t>(s.rows.size() / hid);
  if (pos0 != end)
    fail("MTP drafter: sequence {} computes positions from {}, but the head has rows up to {}", seq, pos0, end);
  s.rows.resize(s.rows.size() + static_cast<size_t>(n) * hid);
  return s.rows.data() + s.rows.size() - static_cast<size_t>(n) * hid;
}

void MtpDrafter::rewind(int64_t seq, int64_t length) {
  Seq& s = get(seq);
  const size_t hid = static_cast<size_t>(lm_.config().hidden_size);
  if (length < s.read) {  // before what the head read for good: it starts over from there
    s.state.truncate(std::min(length, s.state.length()));
    s.read = s.state.length();
    s.rows.clear();
    return;
  }
  s.rows.resize(std::min(s.rows.size(), static_cast<size_t>(length - s.read) * hid));
}

std::vector<int32_t> MtpDrafter::draft(int64_t seq, std::span<const int32_t> history, int64_t k) {
  Seq& s = get(seq);
  const int64_t hid = lm_.config().hidden_size;
  const int64_t target = static_cast<int64_t>(history.size()) - 1;  // positions the target computed
  const int64_t n = target - s.read;
  if (k <= 0 || n <= 0 || s.read + static_cast<int64_t>(s.rows.size()) / hid != target) return {};
  s.state.truncate(s.read);  // the previous call's further drafts
  std::vector<float> logits(static_cast<size_t>(lm_.vocab_size())), out(static_cast<size_t>(n * hid));
  lm_.mtp_forward(s.state, history.data() + s.read + 1, s.rows.data(), n, logits.data(), out.data());
  s.read = target;
  s.rows.clear();
  std::vector<int32_t> d{argmax(logits)};
  std::vector<float> g(out.end() - hid, out.end()), next(static_cast<size_t>(hid));
  for (int64_t j = 1; j < k && s.state.length() < s.state.capacity(); ++j) {
    lm_.mtp_forward(s.state, &d.back(), g.data(), 1, logits.data(), next.data());
    d.push_back(argmax(logits));
    g.swap(next);
  }
  return d;
}

}  // namespace fp4lm::engine
