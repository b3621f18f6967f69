#pragma once
// Pillow's Image.resize(size, Image.BICUBIC or Image.BILINEAR) on an RGB image, byte for byte: its separable
// convolution (Resample.c: horizontal pass, then vertical, each rounded to 8 bits), the bicubic
// kernel with a = -0.5 widened by the scale when shrinking (antialiasing), and the coefficients in
// 22-bit fixed point. Transformers' PIL-backend image processors resize with exactly this.
#include "vision/image.h"

namespace fp4lm::vision {

RgbImage resize_bicubic_pillow(const RgbImage& in, int out_width, int out_height);

// Pillow's filters as PIL.Image.Resampling numbers them (what "resample" in a
// preprocessor_config.json holds). Both run the same 8-bit separable path; only the kernel and its
// support differ: bilinear is the triangle 1 - |x| with support 1 (widened by the scale when
// shrinking, as bicubic).
enum class PillowFilter { kBilinear = 2, kBicubic = 3 };

RgbImage resize_pillow(const RgbImage& in, int out_width, int out_height, PillowFilter filter);

}  // namespace fp4lm::vision
