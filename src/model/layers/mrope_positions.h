#pragma once
// Qwen's 3-D rotary positions for a prompt with images (transformers' get_rope_index for
// Qwen2-VL / Qwen3-VL / Qwen3.5): text tokens count on one by one with t = h = w; an image's
// placeholder run, starting where the text before it stopped (s), puts its merged patch at grid
// row y, column x of frame f at (s + f, s + y, s + x); the text after it resumes at
// s + max(h, w) / merge_size (one image frame). delta = the largest position + 1 - the token
// count: decoding continues at position length + delta (SequenceState::rope_delta).
#include <cstdint>
#include <span>
#include <vector>

#include "vision/qwen_vl_preprocess.h"

namespace fp4lm::model {

// One image's placeholder run inside a prompt: tokens [first, first + count) with count =
// t * (h / merge) * (w / merge) for its grid (in patches, image_grid_thw's row).
struct ImageRun {
  int64_t first = 0;
  vision::GridThw grid;
};

struct MropePositions {
  std::vector<int64_t> thw;  // 3 per token: t, h, w
  int64_t delta = 0;
};

// The tokens' positions for a prompt of n tokens whose images sit at `runs` (in order, not
// overlapping, inside the prompt: Error otherwise, naming the image). `start`: the position of
// token 0 (a prompt continuing a sequence whose positions already reached it).
MropePositions mrope_positions(int64_t n, std::span<const ImageRun> runs, int64_t merge_size, int64_t start = 0);

// An image's placeholder tokens: t * (h / merge) * (w / merge).
int64_t image_run_tokens(const vision::GridThw& grid, int64_t merge_size);

}  // namespace fp4lm::model
