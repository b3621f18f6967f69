#pragma once
// A rank > 0 of a pipeline after loading: runs rank 0's commands (dist/protocol.h) on its stage
// until rank 0 sends shutdown. A forward's failure is reported down the pipeline (the engine
// fails that batch and goes on); any other failure here ends the whole job (MPI_Abort), since
// rank 0 could not go on without this stage.
#include "dist/mpi_comm.h"
#include "model/causal_lm.h"

namespace fp4lm::dist {

int serve_stage(MpiComm& comm, const model::CausalLM& lm);

}  // namespace fp4lm::dist
