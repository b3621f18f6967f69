#include "dist/pipeline.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/log.h"
#include "dist/pipeline_step_model.h"
#include "dist/protocol.h"
#include "dist/stage_worker.h"
#include "dist/wire.h"
#include "engine/process_stats.h"
#include "model/arch/arch.h"

namespace fp4lm::dist {

namespace {

// An error every rank of the job throws together (rank 0 told them all).
class AgreedError : public Error {
 public:
  using Error::Error;
};

// Rank 0's word to every other rank at each point where all must agree: "" = go on, else the
// error every rank then throws (so no rank waits for one that gave up).
void tell_all(MpiComm& comm, const std::string& error) {
  WireWriter w;
  w.put<uint8_t>(error.empty() ? 1 : 0).put_string(error);
  for (int r = 1; r < comm.size(); ++r) comm.send(r, kHandshake, w.bytes());
}
void hear_verdict(MpiComm& comm) {
  const std::vector<uint8_t> msg = comm.recv(0, kHandshake);
  WireReader r(msg);
  const bool ok = r.get<uint8_t>();
  const std::string error = r.get_string();
  if (!ok) throw AgreedError(error);
}

void put_stage(WireWriter& w, const Stage& s) { w.put<int64_t>(s.first).put<int64_t>(s.end).put<uint64_t>(s.bytes); }
Stage get_stage(WireReader& r) {
  Stage s;
  s.first = r.get<int64_t>();
  s.end = r.get<int64_t>();
  s.bytes = r.get<uint64_t>();
  return s;
}

// What differs between rank 0's expectation and this rank's files ("" = nothing).
std::string compare(const StageFingerprint& want, const StageFingerprint& have, const std::string& dir,
                    const std::string& where) {
  if (want.config != have.config)
    return fmt::format("{}: {}/config.json differs from rank 0's", where, dir);
  for (const auto& [file, hash] : want.files) {
    auto it = have.files.find(file);
    if (it == have.files.end())
      return fmt::format("{}: {}/{} holds none of the stage's tensors that rank 0's does", where, dir, file);
    if (it->second != hash)
      return fmt::format("{}: {}/{} differs from rank 0's (the stage's tensor headers)", where, dir, file);
  }
  for (const auto& [file, hash] : have.files)
    if (!want.files.count(file))
      return fmt::format("{}: {}/{} holds tensors of the stage that rank 0's does not", where, dir, file);
  return "";
}

void put_fingerprint(WireWriter& w, const StageFingerprint& f) {
  w.put<uint64_t>(f.config).put<uint64_t>(f.files.size());
  for (const auto& [file, hash] : f.files) w.put_string(file).put<uint64_t>(hash);
}
StageFingerprint get_fingerprint(WireReader& r) {
  StageFingerprint f;
  f.config = r.get<uint64_t>();
  const uint64_t n = r.get<uint64_t>();
  for (uint64_t i = 0; i < n; ++i) {
    std::string file = r.get_string();
    f.files[file] = r.get<uint64_t>();
  }
  return f;
}

std::string describe(const Stage& s, int64_t layers) {
  return fmt::format("decoder layers [{}, {}){}{}", s.first, s.end, s.first == 0 ? " + embedding" : "",
                     s.end == layers ? " + final norm and lm_head" : "");
}

}  // namespace

Pipeline::Pipeline(std::unique_ptr<MpiComm> comm) : comm_(std::move(comm)) {}

std::string Pipeline::lost(std::chrono::milliseconds silence) const {
  if (!monitor_) return "";
  return silence.count() > 0 ? monitor_->declare_if_silent(silence) : monitor_->lost();
}

std::unique_ptr<Pipeline> Pipeline::join(int size, std::chrono::milliseconds heartbeat_timeout) {
  std::unique_ptr<Pipeline> p(new Pipeline(MpiComm::init()));
  p->heartbeat_timeout_ = heartbeat_timeout;
  if (p->comm_->size() != size)
    usage_fail("--pipeline-parallel-size {} but {} processes run (start it as `mpirun -np {} fp4lm ...`)", size,
               p->comm_->size(), size);
  return p;
}

Pipeline::~Pipeline() {
  if (is_driver() && !loading_) {  // rank 0 failed before loading: the others wait for its plan
    try {
      tell_all(*comm_, fmt::format("rank 0 on {} stopped before loading the model (see its error)", comm_->host()));
    } catch (const std::exception&) {
    }
  }
  if (monitor_ && !monitor_->lost().empty()) {
    log().error("pipeline: ending the job: {}", monitor_->lost());
    comm_->abort(1);
  }
  if (monitor_) monitor_->stop();
  if (driver_) {
    try {
      driver_->shutdown();
    } catch (const std::exception& e) {
      log().warn("pipeline: could not tell the other ranks to end: {}", e.what());
    }
  }
  if (monitor_) monitor_->drain();
}

engine::Runtime Pipeline::load(const std::string& dir, const model::EngineOptions& opts, model::LoadOptions lo) {
  MpiComm& c = *comm_;
  loading_ = true;
  std::vector<Stage> plan;
  std::shared_ptr<io::Checkpoint> ckpt;
  try {
    ckpt = io::Checkpoint::open(dir);
    plan = plan_stages(layer_bytes(*ckpt), c.size());
  } catch (const std::exception& e) {
    tell_all(c, fmt::format("rank 0 on {}: {}", c.host(), e.what()));
    throw;
  }
  tell_all(c, "");
  const int64_t layers = plan.back().end;
  for (int r = 1; r < c.size(); ++r) {
    WireWriter w;
    w.put<uint64_t>(plan.size());
    for (const Stage& s : plan) put_stage(w, s);
    put_fingerprint(w, fingerprint(*ckpt, plan[static_cast<size_t>(r)], layers));
    c.send(r, kHandshake, w.bytes());
  }
  std::string error;
  for (int r = 1; r < c.size(); ++r) {
    const std::vector<uint8_t> msg = c.recv(r, kHandshake);
    WireReader rd(msg);
    const std::string e = rd.get_string();
    if (error.empty()) error = e;
  }
  tell_all(c, error);
  if (!error.empty()) throw Error(error);
  load_stage(ckpt, plan[0], opts, lo, plan);
  driver_ = std::make_unique<PipelineStepModel>(c, *lm_, rewind_);
  auto lost = on_lost_ ? on_lost_ : [this](const std::string& why) {
    log().error("pipeline: ending the job: {}", why);
    comm_->abort(1);
  };
  monitor_ = std::make_unique<HeartbeatMonitor>(c, hosts_, heartbeat_timeout_, lost);
  driver_->set_monitor(monitor_.get());
  log().info("pipeline: a rank silent for {:.1f} s ends the job (heartbeats every {} ms)",
             heartbeat_timeout_.count() / 1000.0, kHeartbeatPeriod.count());
  return engine::Runtime::over(*driver_, *lm_);
}

int Pipeline::run_worker(const std::string& dir, const model::EngineOptions& opts, model::LoadOptions lo) {
  try {
    return work(dir, opts, lo);
  } catch (const AgreedError&) {
    throw;  // every rank stops with it
  } catch (const std::exception& e) {
    // This rank alone failed where the others wait for it: the job cannot go on.
    log().error("pipeline rank {} on {}: {}; ending the job", comm_->rank(), comm_->host(), e.what());
    comm_->abort(1);
  }
}

int Pipeline::work(const std::string& dir, const model::EngineOptions& opts, model::LoadOptions lo) {
  MpiComm& c = *comm_;
  hear_verdict(c);  // rank 0 planned (or failed to)
  const std::vector<uint8_t> msg = c.recv(0, kHandshake);
  WireReader rd(msg);
  std::vector<Stage> plan(rd.get<uint64_t>());
  for (Stage& s : plan) s = get_stage(rd);
  const StageFingerprint want = get_fingerprint(rd);
  const Stage& mine = plan.at(static_cast<size_t>(c.rank()));
  std::shared_ptr<io::Checkpoint> ckpt;
  std::string error;
  const std::string where = fmt::format("pipeline rank {} on host {}", c.rank(), c.host());
  try {
    ckpt = io::Checkpoint::open(dir);
    error = compare(want, fingerprint(*ckpt, mine, plan.back().end), dir, where);
  } catch (const std::exception& e) {
    error = fmt::format("{}: {}", where, e.what());
  }
  WireWriter w;
  w.put_string(error);
  c.send(0, kHandshake, w.bytes());
  hear_verdict(c);
  load_stage(ckpt, mine, opts, lo, plan);
  HeartbeatSender beat(c);
  return serve_stage(c, *lm_);
}

void Pipeline::load_stage(const std::shared_ptr<io::Checkpoint>& ckpt, const Stage& s,
                          const model::EngineOptions& opts, model::LoadOptions lo, const std::vector<Stage>& plan) {
  MpiComm& c = *comm_;
  lo.first_layer = s.first;
  lo.end_layer = s.end;
  std::string error;
  try {
    lm_ = model::CausalLM::load(ckpt, opts, lo);
  } catch (const std::exception& e) {
    error = fmt::format("pipeline rank {} on host {} ({}): {}", c.rank(), c.host(),
                        describe(s, plan.back().end), e.what());
  }
  // Every stage reports; rank 0 fixes the common row alignment (steps must cut where the whole
  // model would) and logs the stages.
  struct Report {
    std::string error, host;
    int64_t align = 1;
    uint8_t recurrent = 0;
    uint8_t rewind = 1;           // its recurrent slots can be cut back (speculative decoding)
    uint64_t replay_row = 0;      // its replay log bytes per verify row
    uint64_t weights = 0, rss = 0;
    int64_t pid = 0;
  };
  Report mine{error, c.host(), lm_ ? lm_->state_layout().row_alignment() : 1,
              static_cast<uint8_t>(lm_ && !lm_->state_layout().recurrent_slots().empty()),
              static_cast<uint8_t>(!lm_ || lm_->state_layout().can_rewind()),
              lm_ ? lm_->state_layout().replay_log_bytes(1) : 0, lm_ ? lm_->weight_bytes() : 0, engine::peak_rss_bytes(), static_cast<int64_t>(::getpid())};
  if (c.rank() != 0) {
    WireWriter w;
    w.put_string(mine.error).put_string(mine.host).put<int64_t>(mine.align).put<uint8_t>(mine.recurrent);
    w.put<uint8_t>(mine.rewind).put<uint64_t>(mine.replay_row);
    w.put<uint64_t>(mine.weights).put<uint64_t>(mine.rss).put<int64_t>(mine.pid);
    c.send(0, kHandshake, w.bytes());
    const std::vector<uint8_t> msg = c.recv(0, kHandshake);
    WireReader r(msg);
    const bool ok = r.get<uint8_t>();
    const std::string why = r.get_string();
    if (!ok) throw AgreedError(why);
    const int64_t align = r.get<int64_t>();
    has_recurrent_ = r.get<uint8_t>();
    lm_->align_rows(align);
    return;
  }
  std::vector<Report> all{mine};
  for (int r = 1; r < c.size(); ++r) {
    const std::vector<uint8_t> msg = c.recv(r, kHandshake);
    WireReader rd(msg);
    Report rep;
    rep.error = rd.get_string();
    rep.host = rd.get_string();
    rep.align = rd.get<int64_t>();
    rep.recurrent = rd.get<uint8_t>();
    rep.rewind = rd.get<uint8_t>();
    rep.replay_row = rd.get<uint64_t>();
    rep.weights = rd.get<uint64_t>();
    rep.rss = rd.get<uint64_t>();
    rep.pid = rd.get<int64_t>();
    all.push_back(rep);
  }
  int64_t align = 1;
  for (const Report& rep : all) {
    if (error.empty()) error = rep.error;
    align = std::lcm(align, rep.align);
    has_recurrent_ = has_recurrent_ || rep.recurrent;
    rewind_.can = rewind_.can && rep.rewind;
    rewind_.replay_row_bytes = std::max<size_t>(rewind_.replay_row_bytes, rep.replay_row);
  }
  WireWriter w;
  w.put<uint8_t>(error.empty() ? 1 : 0).put_string(error).put<int64_t>(align).put<uint8_t>(has_recurrent_);
  for (int r = 1; r < c.size(); ++r) c.send(r, kHandshake, w.bytes());
  if (!error.empty()) throw Error(error);
  lm_->align_rows(align);
  for (const Report& rep : all) hosts_.push_back(rep.host);
  for (size_t k = 1; k < plan.size(); ++k)  // shared K/V that crosses a cut (model/state/stage_kv.h)
    if (const std::vector<int64_t> kv = model::kv_read_across(lm_->config(), plan[k].first); !kv.empty())
      log().info("pipeline: stage {} receives the K/V of decoder layer(s) {} with the residual stream from stage {} "
                 "(layers it or later stages hold attend to them)",
                 k, fmt::join(kv, ", "), k - 1);
  for (size_t k = 0; k < all.size(); ++k)
    log().info("pipeline stage {}: {} on host {} (pid {}): {} bytes read per token ({:.1f} MiB), resident weight "
               "bytes {}, peak RSS after load {:.1f} MiB",
               k, describe(plan[k], plan.back().end), all[k].host, all[k].pid, plan[k].bytes,
               plan[k].bytes / 1048576.0, all[k].weights, all[k].rss / 1048576.0);
  if (has_recurrent_ && rewind_.can)
    log().info("pipeline: speculative decoding rewinds the recurrent stages by replaying each verify chunk's "
               "accepted rows ({} replay log bytes per verify row on the largest stage)",
               rewind_.replay_row_bytes);
  else if (has_recurrent_)
    log().info("pipeline: a stage keeps a recurrent state that cannot be replayed, so speculative decoding cannot "
               "rewind");
  log().info("pipeline: prefix caching is off (each stage keeps its own K/V)");
}

}  // namespace fp4lm::dist
