#include "dist/pipeline_step_model.h"

#include <algorithm>

#include "core/error.h"
#include "dist/protocol.h"
#include "dist/wire.h"

namespace fp4lm::dist {

PipelineStepModel::PipelineStepModel(MpiComm& comm, const model::CausalLM& lm, Rewind rewind)
    : comm_(comm), lm_(lm), rewind_(rewind), store_(lm), link_(comm, -1, comm.size() > 1 ? 1 : -1) {
  const int64_t most = lm_.max_model_len();
  WireWriter w;
  w.put(Op::bytes_for).put<int64_t>(most);
  to_all(w.bytes());
  bytes_for_.resize(static_cast<size_t>(most));
  for (int64_t c = 1; c <= most; ++c) bytes_for_[static_cast<size_t>(c - 1)] = lm_.sequence_bytes(c);
  for (int r = 1; r < comm_.size(); ++r) {
    const std::vector<uint8_t> reply = wait(r, kReply);
    WireReader rd(reply);
    const std::vector<uint64_t> theirs = rd.get_array<uint64_t>();
    if (theirs.size() != bytes_for_.size())
      fail("pipeline: rank {} sized {} capacities, rank 0 {}", r, theirs.size(), bytes_for_.size());
    for (size_t i = 0; i < theirs.size(); ++i) bytes_for_[i] = std::max<size_t>(bytes_for_[i], theirs[i]);
  }
}

void PipelineStepModel::set_monitor(const HeartbeatMonitor* m) {
  monitor_ = m;
  link_.set_abandon([m] { return m->lost(); });
}

void PipelineStepModel::check_alive() const {
  if (!monitor_) return;
  if (std::string why = monitor_->lost(); !why.empty()) throw Error(why);
}

std::vector<uint8_t> PipelineStepModel::wait(int src, int tag) const {
  while (true) {
    check_alive();
    if (auto m = comm_.recv_until(src, tag, std::chrono::steady_clock::now() + std::chrono::milliseconds(100)))
      return std::move(*m);
  }
}

void PipelineStepModel::to_all(const std::vector<uint8_t>& cmd) const {
  check_alive();
  const HeartbeatMonitor* m = monitor_;
  for (int r = 1; r < comm_.size(); ++r)
    comm_.send(r, kCommand, cmd, m ? std::function<std::string()>([m] { return m->lost(); }) : nullptr);
}

size_t PipelineStepModel::bytes_for(int64_t capacity) const {
  if (capacity < 1 || capacity > static_cast<int64_t>(bytes_for_.size()))
    fail("pipeline: a sequence of capacity {} (expected 1..max_model_len {})", capacity, bytes_for_.size());
  return bytes_for_[static_cast<size_t>(capacity - 1)];
}

int64_t PipelineStepModel::allocate(int64_t capacity) {
  const int64_t seq = store_.allocate(capacity);  // checks the capacity as every rank will
  WireWriter w;
  w.put(Op::allocate).put<int64_t>(seq).put<int64_t>(capacity);
  to_all(w.bytes());
  return seq;
}

void PipelineStepModel::release(int64_t seq) {
  store_.release(seq);
  // Once the pipeline is lost there is nobody to tell; failing requests release their sequences.
  if (monitor_ && !monitor_->lost().empty()) return;
  WireWriter w;
  w.put(Op::release).put<int64_t>(seq);
  to_all(w.bytes());
}

void PipelineStepModel::rewind(int64_t seq, int64_t length) {
  store_.get(seq).truncate(length);
  WireWriter w;
  w.put(Op::rewind).put<int64_t>(seq).put<int64_t>(length);
  to_all(w.bytes());
}

void PipelineStepModel::forward(std::span<const engine::StepChunk> chunks) {
  if (!in_flight_.empty()) fail("pipeline: forward() while {} submitted forwards are not collected", in_flight_.size());
  submit(chunks);
  collect();
}

void PipelineStepModel::submit(std::span<const engine::StepChunk> chunks) {
  // Check what rank 0 can before any rank starts: a sequence rank 0 does not know fails here.
  std::vector<model::SequenceChunk> batch;
  for (const engine::StepChunk& c : chunks) {
    if (c.embeds || c.positions) fail("pipeline-parallel serving does not run prompts with images (issue 43)");
    model::SequenceChunk s{&store_.get(c.seq), c.tokens, c.n, model::LogitsMode::none, nullptr};
    s.rewindable = c.rewindable;
    batch.push_back(s);
  }
  WireWriter w;
  w.put(Op::forward).put<uint64_t>(chunks.size());
  for (const engine::StepChunk& c : chunks)
    w.put<int64_t>(c.seq).put<int64_t>(c.n).put<uint8_t>(!c.logits ? 0 : c.all_logits ? 2 : 1).put<uint8_t>(c.rewindable);
  for (const engine::StepChunk& c : chunks) w.put_array(std::span<const int32_t>(c.tokens, static_cast<size_t>(c.n)));
  to_all(w.bytes());

  std::string error;
  std::exception_ptr own;
  try {
    lm_.forward(batch, &link_);
  } catch (const std::exception& e) {
    error = e.what();
    own = std::current_exception();
  }
  link_.finish(error);
  in_flight_.push_back({std::vector<engine::StepChunk>(chunks.begin(), chunks.end()), own});
}

void PipelineStepModel::collect() {
  if (in_flight_.empty()) fail("pipeline: collect() without a forward in flight");
  const InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  // The last stage's answer: its logits, or the first error of any stage. (After an error the
  // stages' states may disagree; the engine fails and releases every sequence of the batch.)
  const std::vector<uint8_t> result = wait(comm_.size() - 1, kResult);
  WireReader r(result);
  if (!r.get<uint8_t>()) {
    const std::string why = r.get_string();
    if (f.own) std::rethrow_exception(f.own);  // rank 0's own error, with its type
    throw Error(why);
  }
  if (f.own) std::rethrow_exception(f.own);
  const size_t vocab = static_cast<size_t>(lm_.vocab_size());
  for (const engine::StepChunk& c : f.chunks)
    if (c.logits) r.get_into(c.logits, (c.all_logits ? static_cast<size_t>(c.n) : 1) * vocab);
}

engine::PrefixSupport PipelineStepModel::prefix_support(int64_t) const {
  engine::PrefixSupport s;
  s.unsupported = "under pipeline parallelism each stage keeps its layers' K/V on its own rank";
  return s;
}

void PipelineStepModel::save_positions(int64_t, int64_t, int64_t, std::vector<uint8_t>&, std::vector<uint8_t>*) {
  fail("prefix cache: not available under pipeline parallelism");
}

void PipelineStepModel::load_positions(int64_t, std::span<const std::vector<uint8_t>* const>, int64_t,
                                       const std::vector<uint8_t>*) {
  fail("prefix cache: not available under pipeline parallelism");
}

void PipelineStepModel::shutdown() {
  if (shut_) return;
  shut_ = true;
  // The last stage waits until its answers are taken (a failed forward's too).
  while (!in_flight_.empty()) try {
      collect();
    } catch (const std::exception&) {
      check_alive();
    }
  WireWriter w;
  w.put(Op::shutdown);
  to_all(w.bytes());
}

}  // namespace fp4lm::dist
