#include "dist/stage_worker.h"

#include <algorithm>
#include <map>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "core/log.h"

#include "dist/mpi_stage_link.h"
#include "dist/protocol.h"
#include "dist/wire.h"
#include "model/state/sequence_store.h"

namespace fp4lm::dist {

namespace {

class StageWorker {
 public:
  StageWorker(MpiComm& comm, const model::CausalLM& lm)
      : comm_(comm), lm_(lm), store_(lm),
        link_(comm, comm.rank() - 1, comm.rank() + 1 < comm.size() ? comm.rank() + 1 : -1) {}

  // Returns false on shutdown.
  bool run_one() {
    const std::vector<uint8_t> msg = comm_.recv(0, kCommand);
    WireReader r(msg);
    switch (r.get<Op>()) {
      case Op::allocate: {
        const int64_t seq = r.get<int64_t>(), capacity = r.get<int64_t>();
        ids_[seq] = store_.allocate(capacity);
        return true;
      }
      case Op::release: {
        const int64_t seq = r.get<int64_t>();
        store_.release(local(seq));
        ids_.erase(seq);
        return true;
      }
      case Op::rewind: {
        const int64_t seq = r.get<int64_t>(), length = r.get<int64_t>();
        store_.get(local(seq)).truncate(length);
        return true;
      }
      case Op::bytes_for: {
        const int64_t most = r.get<int64_t>();
        std::vector<uint64_t> table(static_cast<size_t>(std::max<int64_t>(most, 0)));
        for (int64_t c = 1; c <= most; ++c) table[static_cast<size_t>(c - 1)] = lm_.sequence_bytes(c);
        WireWriter w;
        w.put_array(std::span<const uint64_t>(table));
        comm_.send(0, kReply, w.bytes());
        return true;
      }
      case Op::forward:
        forward(r);
        return true;
      case Op::shutdown:
        return false;
    }
    fail("pipeline: unknown command from rank 0");
  }

 private:
  int64_t local(int64_t seq) const {
    auto it = ids_.find(seq);
    if (it == ids_.end()) fail("pipeline: rank 0 named sequence {}, which this rank does not hold", seq);
    return it->second;
  }

  void forward(WireReader& r) {
    const uint64_t count = r.get<uint64_t>();
    std::vector<model::SequenceChunk> batch(count);
    std::vector<uint8_t> modes(count);
    for (uint64_t i = 0; i < count; ++i) {
      batch[i].state = &store_.get(local(r.get<int64_t>()));
      batch[i].n = r.get<int64_t>();
      modes[i] = r.get<uint8_t>();
      batch[i].rewindable = r.get<uint8_t>() != 0;
    }
    std::vector<std::vector<int32_t>> tokens(count);
    const bool last = lm_.has_lm_head();
    const size_t vocab = static_cast<size_t>(lm_.vocab_size());
    std::vector<std::vector<float>> logits(count);
    for (uint64_t i = 0; i < count; ++i) {
      tokens[i] = r.get_array<int32_t>();
      batch[i].tokens = tokens[i].data();
      if (static_cast<int64_t>(tokens[i].size()) != batch[i].n) fail("pipeline: a chunk's tokens do not match its length");
      if (last && modes[i]) {
        batch[i].logits = modes[i] == 2 ? model::LogitsMode::all : model::LogitsMode::last;
        logits[i].resize((modes[i] == 2 ? static_cast<size_t>(batch[i].n) : 1) * vocab);
        batch[i].out = logits[i].data();
      }
    }
    std::string error;
    try {
      lm_.forward(batch, &link_);
    } catch (const RemoteStageError& e) {
      error = e.what();  // a stage before failed; its text names it
    } catch (const std::exception& e) {
      error = fmt::format("pipeline stage {} (rank {} on {}, decoder layers [{}, {})): {}", comm_.rank(),
                          comm_.rank(), comm_.host(), lm_.first_layer(), lm_.end_layer(), e.what());
    }
    error = link_.finish(error);
    if (!last) return;
    WireWriter w;
    w.put<uint8_t>(error.empty() ? 1 : 0);
    if (!error.empty()) w.put_string(error);
    else
      for (uint64_t i = 0; i < count; ++i)
        if (modes[i]) w.put_array(std::span<const float>(logits[i]));
    // Posted, not sent: rank 0 may be sending this rank the next micro-batch meanwhile
    // (pipelined batches), and takes this answer only when it collects that forward.
    comm_.post(0, kResult, w.bytes());
  }

  MpiComm& comm_;
  const model::CausalLM& lm_;
  model::SequenceStore store_;
  MpiStageLink link_;
  std::map<int64_t, int64_t> ids_;  // rank 0's sequence id -> this rank's
};

}  // namespace

int serve_stage(MpiComm& comm, const model::CausalLM& lm) {
  StageWorker w(comm, lm);
  try {
    while (w.run_one()) {
    }
    comm.flush_posted();  // rank 0 collected every forward before it ended the job
  } catch (const std::exception& e) {
    log().error("pipeline stage {} (rank {} on {}): {}; ending the job", comm.rank(), comm.rank(), comm.host(),
                e.what());
    comm.abort(1);
  }
  return 0;
}

}  // namespace fp4lm::dist
