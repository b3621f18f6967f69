#pragma once
// The messages between the ranks of a pipeline (dist/pipeline.h). Rank 0 drives: it sends each
// command to every other rank (tag kCommand) and runs the first stage itself. During a forward,
// stage k sends each step's residual stream to stage k + 1 (tag kHidden; with the K/V rows that
// later stages' layers read and the per-step values carried across the cuts, model/state/stage_kv.h and
// model/state/stage_carried.h, as a byte array after it), and ends that stream
// with kEnd, or kFail carrying the error when it or a stage before it failed; so every receiver
// knows when a forward is over, whatever failed where. The last stage answers rank 0 (tag
// kResult): ok and the logits asked for, or the error.
#include <cstdint>

namespace fp4lm::dist {

enum Tag : int { kCommand = 1, kHidden = 2, kResult = 3, kReply = 4, kHandshake = 5, kHeartbeat = 6 };

enum class Op : uint8_t {
  allocate = 1,  // i64 seq (rank 0's id), i64 capacity
  release,       // i64 seq
  rewind,        // i64 seq, i64 length
  forward,       // u64 chunks; per chunk i64 seq, i64 n, u8 logits (0 none, 1 last, 2 all), u8 rewindable
                 // (a speculative verify chunk: a rewind may cut back inside it); tokens
  bytes_for,     // i64 L -> kReply: u64[L], the bytes a sequence of capacity 1..L reserves on that rank
  shutdown,
};

enum class HiddenKind : uint8_t { data = 0, end = 1, fail = 2 };

}  // namespace fp4lm::dist
