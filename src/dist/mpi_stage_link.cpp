#include "dist/mpi_stage_link.h"

#include "dist/protocol.h"
#include "dist/wire.h"

namespace fp4lm::dist {

void MpiStageLink::receive(float* h, int64_t rows, int64_t hidden, std::vector<uint8_t>& extra) {
  if (prev_ < 0 || prev_ended_) fail("pipeline: stage expects a residual stream that no stage sends");
  const std::vector<uint8_t> msg = comm_.recv(prev_, kHidden);
  WireReader r(msg);
  const auto kind = static_cast<HiddenKind>(r.get<uint8_t>());
  if (kind == HiddenKind::data) {
    r.get_into(h, static_cast<size_t>(rows * hidden));
    extra = r.get_array<uint8_t>();
    return;
  }
  prev_ended_ = true;
  prev_error_ = kind == HiddenKind::fail ? r.get_string() : "the stage before ended the forward early";
  throw RemoteStageError(prev_error_);
}

void MpiStageLink::send(const float* h, int64_t rows, int64_t hidden, std::span<const uint8_t> extra) {
  if (next_ < 0) fail("pipeline: the last stage has no stage to send to");
  WireWriter w;
  w.put<uint8_t>(static_cast<uint8_t>(HiddenKind::data));
  w.put_array(std::span<const float>(h, static_cast<size_t>(rows * hidden)));
  w.put_array(extra);
  comm_.send(next_, kHidden, w.bytes(), abandon_);
}

std::string MpiStageLink::finish(const std::string& error) {
  std::string err = error;
  if (prev_ >= 0)
    while (!prev_ended_) {  // the rest of the stream before: steps this stage no longer runs
      const std::vector<uint8_t> msg = comm_.recv(prev_, kHidden);
      WireReader r(msg);
      const auto kind = static_cast<HiddenKind>(r.get<uint8_t>());
      if (kind == HiddenKind::data) continue;
      prev_ended_ = true;
      if (kind == HiddenKind::fail) prev_error_ = r.get_string();
    }
  if (err.empty()) err = prev_error_;
  if (next_ >= 0) {
    WireWriter w;
    w.put<uint8_t>(static_cast<uint8_t>(err.empty() ? HiddenKind::end : HiddenKind::fail));
    if (!err.empty()) w.put_string(err);
    comm_.send(next_, kHidden, w.bytes(), abandon_);
  }
  prev_ended_ = false;
  prev_error_.clear();
  return err;
}

}  // namespace fp4lm::dist
