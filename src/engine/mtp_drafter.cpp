#include "engine/mtp_drafter.h"

#include <algorithm>
#include <cstddef>

#include "core/error.h"

namespace fp4lm::engine {

namespace {
int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}
}  // namespace

void MtpDrafter::allocate(int64_t seq, int64_t capacity) {
  seqs_.erase(seq);
  seqs_.emplace(seq, Seq{lm_.new_mtp_sequence(capacity, seq), 0, {}, {}});
}

const MtpDrafter::Seq& MtpDrafter::get(int64_t seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail("MTP drafter: no sequence {}", seq);
  return it->second;
}

float* MtpDrafter::hidden_rows(int64_t seq, int64_t pos0, int64_t n, const int32_t* tokens) {
  Seq& s = get(seq);
  const size_t hid = static_cast<size_t>(lm_.config().hidden_size);
  const int64_t end = s.read + static_cast<int64_t>(s.tokens.size());
  if (pos0 != end)
    fail("MTP drafter: sequence {} computes positions from {}, but the head has rows up to {}", seq, pos0, end);
  s.tokens.insert(s.tokens.end(), tokens, tokens + n);
  s.rows.resize(s.rows.size() + static_cast<size_t>(n) * hid);
  return s.rows.data() + s.rows.size() - static_cast<size_t>(n) * hid;
}

void MtpDrafter::settle(std::span<const StepChunk> chunks) {
  const size_t hid = static_cast<size_t>(lm_.config().hidden_size);
  std::vector<model::CausalLM::MtpRows> rows;
  std::vector<Seq*> read;
  for (const StepChunk& c : chunks) {
    Seq& s = get(c.seq);
    const int64_t held = static_cast<int64_t>(s.tokens.size());
    if (c.rewindable || held <= kMaxUnreadRows) continue;  // (a verify chunk may still be cut back)
    s.state.truncate(s.read);  // the last draft call's further drafts
    // Position q needs the token at q + 1: every row but the last, no logits.
    rows.push_back({&s.state, s.tokens.data() + 1, s.rows.data(), held - 1, nullptr, nullptr});
    read.push_back(&s);
  }
  if (rows.empty()) return;
  lm_.mtp_forward(rows);
  for (Seq* s : read) {
    const size_t n = s->tokens.size() - 1;
    s->read += static_cast<int64_t>(n);
    s->tokens.erase(s->tokens.begin(), s->tokens.begin() + static_cast<std::ptrdiff_t>(n));
    s->rows.erase(s->rows.begin(), s->rows.begin() + static_cast<std::ptrdiff_t>(n * hid));
    release_spare(*s);
  }
}

void MtpDrafter::release_spare(Seq& s) const {
  // A long chunk left room for its rows: give it back once the head has read them.
  const size_t most = static_cast<size_t>(2 * kMaxUnreadRows);
  if (s.tokens.capacity() <= most) return;
  s.rows.shrink_to_fit();
  s.tokens.shrink_to_fit();
}

size_t MtpDrafter::held_bytes(int64_t k) const {
  const size_t rows = static_cast<size_t>(std::max(kMaxUnreadRows, k + 1));
  return rows * (static_cast<size_t>(lm_.config().hidden_size) * sizeof(float) + sizeof(int32_t));
}

void MtpDrafter::rewind(int64_t seq, int64_t length) {
  Seq& s = get(seq);
  const size_t hid = static_cast<size_t>(lm_.config().hidden_size);
  if (length < s.read) {  // before what the head read for good: it starts over from there
    s.state.truncate(std::min(length, s.state.length()));
    s.read = s.state.length();
    s.rows.clear();
    s.tokens.clear();
    return;
  }
  const size_t keep = std::min(s.tokens.size(), static_cast<size_t>(length - s.read));
  s.tokens.resize(keep);
  s.rows.resize(keep * hid);
}

std::vector<std::vector<int32_t>> MtpDrafter::draft(std::span<const StepModel::DraftAsk> asks) {
  const int64_t hid = lm_.config().hidden_size, vocab = lm_.vocab_size();
  std::vector<std::vector<int32_t>> drafts(asks.size());
  // Draft 1: each sequence's head catches up over the positions the target computed since.
  struct Live {
    size_t ask;
    Seq* s;
    std::vector<float> logits, g;
  };
  std::vector<Live> live;
  std::vector<model::CausalLM::MtpRows> rows;
  for (size_t i = 0; i < asks.size(); ++i) {
    Seq& s = get(asks[i].seq);
    const int64_t target = static_cast<int64_t>(asks[i].history.size()) - 1;  // positions the target computed
    const int64_t n = target - s.read;
    if (asks[i].k <= 0 || n <= 0 || s.read + static_cast<int64_t>(s.rows.size()) / hid != target) continue;
    s.state.truncate(s.read);  // the previous call's further drafts
    live.push_back({i, &s, std::vector<float>(static_cast<size_t>(vocab)), std::vector<float>(static_cast<size_t>(n * hid))});
  }
  for (Live& l : live) {
    const int64_t n = static_cast<int64_t>(l.g.size()) / hid;
    rows.push_back({&l.s->state, asks[l.ask].history.data() + l.s->read + 1, l.s->rows.data(), n, l.logits.data(),
                    l.g.data()});
  }
  if (rows.empty()) return drafts;
  lm_.mtp_forward(rows);
  for (Live& l : live) {
    l.s->read += static_cast<int64_t>(l.g.size()) / hid;
    l.s->rows.clear();
    l.s->tokens.clear();
    release_spare(*l.s);
    l.g.erase(l.g.begin(), l.g.end() - hid);  // the last row's output feeds the next draft
    drafts[l.ask].push_back(argmax(l.logits));
  }
  // Drafts 2..k: one row each for the sequences that want more, fed the head's own output.
  std::vector<std::vector<float>> next(live.size(), std::vector<float>(static_cast<size_t>(hid)));
  for (int64_t j = 1;; ++j) {
    rows.clear();
    std::vector<size_t> in;
    for (size_t i = 0; i < live.size(); ++i) {
      Live& l = live[i];
      if (asks[l.ask].k <= j || l.s->state.length() >= l.s->state.capacity()) continue;
      rows.push_back({&l.s->state, &drafts[l.ask].back(), l.g.data(), 1, l.logits.data(), next[i].data()});
      in.push_back(i);
    }
    if (rows.empty()) break;
    lm_.mtp_forward(rows);
    for (size_t i : in) {
      live[i].g.swap(next[i]);
      drafts[live[i].ask].push_back(argmax(live[i].logits));
    }
  }
  return drafts;
}

}  // namespace fp4lm::engine
