#pragma once
// Gemma 3 image preprocessing (SigLIP), as transformers 5.24's Gemma3ImageProcessorPil computes it
// (docs/VISION.md): where pan-and-scan is on and the image is elongated enough, crops of the
// original image along its long side; then the image and each crop resized to size.height x
// size.width with Pillow's filter (bilinear in the checkpoints), rescaled and normalized in
// float32, channels first.
#include <cstdint>
#include <vector>

#include "vision/gemma3_processor_config.h"
#include "vision/image.h"

namespace fp4lm::vision {

struct CropBox {
  int x = 0, y = 0, width = 0, height = 0;
};

// The pan-and-scan crops of a height x width image, in the processor's order (row by row); empty
// when pan-and-scan is off or does not activate (aspect ratio below the threshold, crops smaller
// than the minimum size).
std::vector<CropBox> gemma3_pan_and_scan(int height, int width, const Gemma3ProcessorConfig& config);

struct Gemma3Pixels {
  int64_t num_crops = 0;        // num_crops's entry for this image
  int64_t images = 0;           // 1 + num_crops: the image first, then its crops
  int64_t height = 0, width = 0;
  std::vector<float> pixel_values;  // images x 3 x height x width, row-major
};

Gemma3Pixels gemma3_preprocess(const RgbImage& image, const Gemma3ProcessorConfig& config);

// Image tokens the language model sees for an image of this size: image_seq_length for the image
// and for each crop (Gemma3Processor; the begin/end-of-image tokens and the text around the crops
// are the chat template's).
int64_t gemma3_image_tokens(int height, int width, const Gemma3ProcessorConfig& config);

}  // namespace fp4lm::vision
