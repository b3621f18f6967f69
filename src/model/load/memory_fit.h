#pragma once
// Whether a model's weights fit in this machine's RAM, decided from the safetensors headers
// before anything is mapped: mmapped weights larger than RAM would be read from disk at every
// token (orders of magnitude slower), so load fails fast with the figures instead — unless
// FP4LM_ALLOW_PAGING=1 says to run from the page cache anyway.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/checkpoint.h"

namespace fp4lm::model {

// Bytes of the tensors a run maps for decoder layers [first_layer, end_layer): those layers' tensors
// under the text model's `prefix` ("model." …), and, with `ends`, the embedding, final norm and
// lm_head — not the layers past the model's num_hidden_layers (MTP), nor vision / audio towers.
size_t stage_weight_bytes(const io::Checkpoint& ckpt, const std::string& prefix, int64_t first_layer,
                          int64_t end_layer, bool ends = true);

// MemTotal of /proc/meminfo in bytes; 0 when it cannot be read.
size_t physical_ram_bytes();

// An Error naming the checkpoint, the weights' size and the RAM when weights > ram (ram 0: fits),
// and how to go on (more machines, FP4LM_ALLOW_PAGING=1).
void check_weights_fit(const std::string& dir, size_t weights, size_t ram);

}  // namespace fp4lm::model
