#pragma once
// Pillow's Image.resize(size, Image.BICUBIC) on an RGB image, byte for byte: its separable
// convolution (Resample.c: horizontal pass, then vertical, each rounded to 8 bits), the bicubic
// kernel with a = -0.5 widened by the scale when shrinking (antialiasing), and the coefficients in
// 22-bit fixed point. Transformers' PIL-backend image processors resize with exactly this.
#include "vision/image.h"

namespace fp4lm::vision {

RgbImage resize_bicubic_pillow(const RgbImage& in, int out_width, int out_height);

}  // namespace fp4lm::vision
