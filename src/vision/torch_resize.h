#pragma once
// torch's uint8 antialiased bicubic resize on CPU (F.interpolate(mode="bicubic", antialias=True,
// align_corners=False) on a uint8 tensor, which torchvision's resize runs natively for uint8:
// transformers' torchvision-backend processors, the Qwen video processors among them), byte for
// byte. The same separable form as Pillow's (horizontal pass, then vertical, each rounded to 8
// bits; the a = -0.5 cubic widened by the scale when shrinking), but each axis's normalized weights
// go to int16 at the largest precision (at most 22 bits) under which that axis's largest weight
// stays below 2^15, where Pillow keeps 22 bits: results differ from Pillow's by a level or more.
#include "vision/image.h"

namespace fp4lm::vision {

RgbImage resize_bicubic_torch_aa(const RgbImage& in, int out_width, int out_height);

}  // namespace fp4lm::vision
