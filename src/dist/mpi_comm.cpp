#include "dist/mpi_comm.h"

#include <cstdlib>
#include <thread>

#include "core/error.h"

#ifdef FP4LM_HAVE_MPI
#include <mpi.h>
#endif

namespace fp4lm::dist {

#ifdef FP4LM_HAVE_MPI

bool mpi_built() { return true; }

struct MpiComm::Posted {
  std::vector<uint8_t> bytes;
  MPI_Request req = MPI_REQUEST_NULL;
};

MpiComm::MpiComm() = default;

namespace {
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fail("MPI: {} failed: {}", what, std::string(text, static_cast<size_t>(len)));
}
}  // namespace

std::unique_ptr<MpiComm> MpiComm::init() {
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  // Errors come back as return codes (and become exceptions) instead of ending the job at once.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::unique_ptr<MpiComm> c(new MpiComm());
  if (provided < MPI_THREAD_MULTIPLE) {  // the heartbeat thread sends while the main thread works
    MPI_Finalize();
    fail("MPI: the library gives thread level {}, the pipeline needs MPI_THREAD_MULTIPLE", provided);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &c->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &c->size_);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  c->host_.assign(name, static_cast<size_t>(len));
  return c;
}

MpiComm::~MpiComm() { MPI_Finalize(); }

void MpiComm::post(int dest, int tag, std::vector<uint8_t> bytes) {
  reap();
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) fail("MPI: a message of {} bytes is too long", bytes.size());
  auto p = std::make_unique<Posted>();
  p->bytes = std::move(bytes);
  check(MPI_Isend(p->bytes.data(), static_cast<int>(p->bytes.size()), MPI_BYTE, dest, tag, MPI_COMM_WORLD, &p->req),
        "MPI_Isend");
  posted_.push_back(std::move(p));
}

void MpiComm::reap() {
  std::erase_if(posted_, [](const std::unique_ptr<Posted>& p) {
    int done = 0;
    check(MPI_Test(&p->req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    return done != 0;
  });
}

void MpiComm::flush_posted() {
  for (int polls = 0; !posted_.empty(); ++polls) {
    reap();
    if (posted_.empty()) return;
    if (polls < 200) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 20 : 500));
  }
}

void MpiComm::send(int dest, int tag, std::span<const uint8_t> bytes, const std::function<std::string()>& abandon) {
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) fail("MPI: a message of {} bytes is too long", bytes.size());
  if (!abandon) {
    check(MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, dest, tag, MPI_COMM_WORLD), "MPI_Send");
    return;
  }
  MPI_Request req;
  check(MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, dest, tag, MPI_COMM_WORLD, &req),
        "MPI_Isend");
  for (int polls = 0;; ++polls) {
    int done = 0;
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    // (The request stays pending: the job is about to end, since its peer will not take it.)
    if (std::string why = abandon(); !why.empty()) throw Error(why);
    if (polls < 200) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 20 : 500));
  }
}

std::optional<std::vector<uint8_t>> MpiComm::recv_until(int src, int tag,
                                                        std::chrono::steady_clock::time_point deadline) {
  // Poll, yielding at first (a pipeline hop is microseconds), then sleeping longer the longer
  // nothing comes (an idle rank must not take a core from one that computes).
  MPI_Message msg;
  MPI_Status st;
  for (int polls = 0;; ++polls) {
    int found = 0;
    check(MPI_Improbe(src, tag, MPI_COMM_WORLD, &found, &msg, &st), "MPI_Improbe");
    if (found) break;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    if (polls < 200) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 20 : 500));
  }
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  std::vector<uint8_t> out(static_cast<size_t>(count));
  check(MPI_Mrecv(out.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE), "MPI_Mrecv");
  return out;
}

std::vector<uint8_t> MpiComm::recv(int src, int tag) {
  return *recv_until(src, tag, std::chrono::steady_clock::time_point::max());
}

void MpiComm::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

#else  // built without MPI

bool mpi_built() { return false; }

struct MpiComm::Posted {};
MpiComm::MpiComm() = default;

std::unique_ptr<MpiComm> MpiComm::init() {
  usage_fail("--pipeline-parallel-size > 1 needs MPI, and this build of fp4lm has none (install openmpi-bin and "
             "libopenmpi-dev, scripts/setup.sh, and rebuild)");
}
MpiComm::~MpiComm() = default;
void MpiComm::send(int, int, std::span<const uint8_t>, const std::function<std::string()>&) { fail("MPI: not built"); }
void MpiComm::post(int, int, std::vector<uint8_t>) { fail("MPI: not built"); }
void MpiComm::reap() {}
void MpiComm::flush_posted() {}
std::optional<std::vector<uint8_t>> MpiComm::recv_until(int, int, std::chrono::steady_clock::time_point) {
  fail("MPI: not built");
}
std::vector<uint8_t> MpiComm::recv(int, int) { fail("MPI: not built"); }
void MpiComm::abort(int code) { std::_Exit(code); }

#endif

}  // namespace fp4lm::dist
